package chaos_test

import (
	"os"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// shared is cmd/proxy-operator, built once for the package, and the real API
// server its processes share.
var shared = operatortest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// long reports whether the long variant runs (CHAOS=long, `make chaos`).
var long = os.Getenv("CHAOS") == "long"

// scaled is ci normally and longRun in the long variant.
func scaled[T any](ci, longRun T) T {
	if long {
		return longRun
	}
	return ci
}
