// Package operatortest holds what tests that run the operator binary share:
// building cmd/proxy-operator once per test package (with -race when the
// tests run with it) beside one real API server. It is used only by tests.
package operatortest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// Run builds the operator (and cmd/forward-proxy beside it, where the local
// provider looks for it), starts the test environment, sets *env and
// *binary, runs the tests and cleans up; it returns the exit code for
// TestMain. It does what testenv.RunMain does, plus removing the binary,
// which RunMain's os.Exit would skip.
func Run(m *testing.M, env **testenv.Environment, binary *string) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "proxy-operator-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "operator tests: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "proxy-operator")
	args := []string{"build", "-o", dir + "/"}
	if RaceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args,
		"github.com/proxyfleet/proxy-operator/cmd/proxy-operator",
		"github.com/proxyfleet/proxy-operator/cmd/forward-proxy")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "operator tests: building cmd/proxy-operator and cmd/forward-proxy: %v\n%s", err, out)
		return 1
	}

	e, err := testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv (run `make testenv` if bin/ lacks kube-apiserver or etcd): %v\n", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
