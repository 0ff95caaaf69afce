package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// Needs is what a test that starts an Environment needs, for
// integration.Needs: a test that calls Start itself rather than through
// Shared.Get says so first, `integration.Needs(t, testenv.Needs)`.
const Needs = "kube-apiserver and etcd from `make testenv`"

// Shared is one Environment for a test package, started by the first test that
// asks for it, so that a package's unit tests run on a checkout where `make
// testenv` has not built kube-apiserver yet. Under -short (the unit loop) the
// tests that ask for it skip, saying what they need; without -short they run,
// and fail naming `make testenv` when its binaries are missing.
//
//	var apiServer = testenv.NewShared(testenv.Options{})
//
//	func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }
//
//	func TestSomething(t *testing.T) { env := apiServer.Get(t); ... }
type Shared struct {
	opts Options

	once sync.Once
	env  *Environment
	err  error
}

// NewShared returns a Shared that starts an Environment with opts on first use.
func NewShared(opts Options) *Shared { return &Shared{opts: opts} }

// Get returns the package's Environment, starting it on the first call. A
// failure to start fails t, now and on every later call. Under -short it
// skips t (integration.Needs).
func (s *Shared) Get(t testing.TB) *Environment {
	t.Helper()
	integration.Needs(t, Needs)
	s.once.Do(func() { s.env, s.err = Start(context.Background(), s.opts) })
	if s.err != nil {
		t.Fatalf("testenv: %v", s.err)
	}
	return s.env
}

// Run runs the package's tests and then stops the Environment if a test
// started it. It returns the exit code for os.Exit.
func (s *Shared) Run(m *testing.M) int { return s.RunWith(m, (*testing.M).Run) }

// RunWith is Run around another harness's main (proxytest.Main, say), which
// runs m itself.
func (s *Shared) RunWith(m *testing.M, run func(*testing.M) int) int {
	code := run(m)
	if err := s.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stop stops the Environment if it was started. Run calls it after the
// tests, when no Get can race it.
func (s *Shared) stop() error {
	if s.env == nil {
		return nil
	}
	return s.env.Stop()
}
