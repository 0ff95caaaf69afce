package e2e_test

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
	// env is the real etcd + kube-apiserver every operator process shares;
	// each run keeps to namespaces and cluster-scoped names of its own.
	env *testenv.Environment
	// operatorBinary is cmd/proxy-operator, built once for the package
	// (with -race when the tests run with it).
	operatorBinary string
)

// TestMain builds the operator and starts the test environment. It does what
// testenv.RunMain does, plus removing the binary, which RunMain's os.Exit
// would skip.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "proxy-operator-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
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
		fmt.Fprintf(os.Stderr, "e2e: building cmd/proxy-operator: %v\n%s", err, out)
		return 1
	}

	e, err := testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv (run `make testenv` if bin/ lacks kube-apiserver or etcd): %v\n", err)
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
