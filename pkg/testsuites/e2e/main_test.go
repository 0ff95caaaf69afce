package e2e_test

import (
	"os"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var (
	// env is the real etcd + kube-apiserver every operator process shares;
	// each run keeps to namespaces and cluster-scoped names of its own.
	env *testenv.Environment
	// operatorBinary is cmd/proxy-operator, built once for the package
	// (with -race when the tests run with it).
	operatorBinary string
)

func TestMain(m *testing.M) { os.Exit(operatortest.Run(m, &env, &operatorBinary)) }
