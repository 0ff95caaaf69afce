package operator_test

import (
	"os"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var (
	// env is the real etcd + kube-apiserver the operator processes share.
	env *testenv.Environment
	// operatorBinary is cmd/proxy-operator, built once for the package.
	operatorBinary string
)

func TestMain(m *testing.M) { os.Exit(operatortest.Run(m, &env, &operatorBinary)) }
