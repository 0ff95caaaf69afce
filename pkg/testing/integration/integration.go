// Package integration tells unit tests from integration tests: an
// integration test is one that needs more than the Go toolchain and this
// process (a real kube-apiserver and etcd, a Debian peer such as tinyproxy
// or curl, a binary built by `go build`, any child process at all).
//
// `go test -short ./...` is the fast unit loop: every integration test
// skips there and says what it needs. Without -short nothing skips, and a
// test whose tool is missing fails naming the make target that builds or
// installs it. The helpers that start such things (testenv.Shared.Get,
// proxytest's Start functions, operatortest) call Needs, so a test that
// uses them needs no line of its own.
//
// It also tells a CI run from a long one (Long, Scaled): `make chaos` runs
// the suites' soaks and long variants at full size, CI at a scale that
// fits its budget.
package integration

import "testing"

// Needs marks t as an integration test that needs what, a phrase naming the
// thing and the make target that provides it ("kube-apiserver and etcd from
// `make testenv`"): under -short it skips t saying so; otherwise it does
// nothing.
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs " + what + "; run without -short (skipped as testing.Short() is true)")
	}
}
