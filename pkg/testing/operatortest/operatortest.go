// Package operatortest holds what tests that run the operator binary share:
// building cmd/proxy-operator once per test package (with -race when the
// tests run with it) beside one real API server. It is used only by tests.
package operatortest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// Shared is a test package's operator binary, built before its tests run,
// and its real API server, started on a test's first use (testenv.Shared).
// A package declares one and its TestMain is os.Exit(shared.Run(m)).
type Shared struct {
	apiServer *testenv.Shared
	binary    string
}

// NewShared returns a Shared with a default API server.
func NewShared() *Shared { return &Shared{apiServer: testenv.NewShared(testenv.Options{})} }

// Setup is what a test gets from Shared.Get.
type Setup struct {
	// Env is the real etcd + kube-apiserver every test of the package shares.
	Env *testenv.Environment
	// Binary is cmd/proxy-operator, with cmd/forward-proxy beside it, where
	// the local provider looks for it.
	Binary string
}

// Get returns the package's Setup, starting the API server on the first
// call. A failure to start it fails t, now and on every later call.
func (s *Shared) Get(t testing.TB) Setup {
	t.Helper()
	return Setup{Env: s.apiServer.Get(t), Binary: s.binary}
}

// Run builds cmd/proxy-operator and cmd/forward-proxy into a temporary
// directory, runs the tests, stops the API server if a test started it and
// removes the binaries. It returns the exit code for os.Exit. Under -short
// it builds nothing: every Get skips its test there (testenv.Shared.Get).
func (s *Shared) Run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return s.apiServer.Run(m)
	}
	dir, err := os.MkdirTemp("", "proxy-operator-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "operator tests: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
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
	s.binary = filepath.Join(dir, "proxy-operator")
	return s.apiServer.Run(m)
}
