package sharedendpoint

import (
	"os"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// shared is cmd/proxy-operator, built once, and the API server it runs on.
var shared = operatortest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
