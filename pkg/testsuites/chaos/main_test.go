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
