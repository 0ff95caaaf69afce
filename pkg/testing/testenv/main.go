package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// RunMain runs a test package against one shared Environment: it starts it, sets
// *env, runs the tests, stops it and exits with the tests' code. Call it from
// TestMain. A failure to start prints the error and exits 1: integration tests
// fail, they never skip. opts, if given, replaces the default Options.
func RunMain(m *testing.M, env **Environment, opts ...Options) {
	os.Exit(runMain(m, env, opts...))
}

func runMain(m *testing.M, env **Environment, opts ...Options) int {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	e, err := Start(context.Background(), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
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
