// Package e2e holds the operator's end-to-end tests. The real
// cmd/proxy-operator binary runs as a process against a real API server
// (pkg/testing/testenv), authenticated with a token of the ServiceAccount that
// artifacts/rbac defines and bound by nothing but those artifacts, while the
// test kubelet (pkg/testing/testenv/kubelet) runs the Pods of the kubernetes
// provider. The tests show that the RBAC artifacts are enough and that every
// verb in them is needed, that logs and events carry no Secret content at
// any verbosity the tests use, and that every metric docs/operations.md
// lists is exported with sane values.
//
// The package holds nothing but tests. It is separate from pkg/operator so
// that its minutes-long runs (dozens of operator processes) stay out of
// pkg/operator's quick process tests; run it with
// `go test -p 1 ./pkg/testsuites/e2e`.
package e2e
