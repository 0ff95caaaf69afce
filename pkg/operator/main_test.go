package operator_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testenv"
)

var (
	// env is the real etcd + kube-apiserver the operator processes share.
	env *testenv.Environment
	// operatorBinary is cmd/proxy-operator, built once for the package.
	operatorBinary string
)

// TestMain builds the operator, starts the test environment, and runs the
// tests. It does what testenv.RunMain does, plus removing the binary, which
// RunMain's os.Exit would skip. With -short only the unit tests run.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "proxy-operator-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "operator tests: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	operatorBinary = filepath.Join(dir, "proxy-operator")
	args := []string{"build", "-o", operatorBinary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/proxyfleet/proxy-operator/cmd/proxy-operator")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "operator tests: building cmd/proxy-operator: %v\n%s", err, out)
		return 1
	}

	e, err := testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
