package chaos_test

import (
	"os"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var (
	// env is the real etcd + kube-apiserver every test shares.
	env *testenv.Environment
	// operatorBinary is cmd/proxy-operator, built once for the package, with
	// cmd/forward-proxy beside it for the local provider.
	operatorBinary string
)

func TestMain(m *testing.M) { os.Exit(operatortest.Run(m, &env, &operatorBinary)) }

// long reports whether the long variant runs (CHAOS=long, `make chaos`).
var long = os.Getenv("CHAOS") == "long"

// scaled is ci normally and longRun in the long variant.
func scaled[T any](ci, longRun T) T {
	if long {
		return longRun
	}
	return ci
}
