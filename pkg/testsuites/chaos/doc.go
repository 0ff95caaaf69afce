// Package chaos is the failure suite: integration tests that break what the
// operator stands on, a real kube-apiserver restarted under it, a provider
// failing every way it can, the operator killed in the middle of a replace,
// thousands of Proxies at once, a site that bans every proxy it is sent
// through the gateway, and check that the fleet converges with nothing
// lost and nothing leaked. It has no code outside its tests.
//
// Each test is bounded in time and stops by itself. They run one after the
// other (no t.Parallel): one of them restarts the API server every test in
// the package shares, and the others measure convergence on a 2-core machine.
//
// `make test` runs the suite at CI scale. `make chaos` runs the long variant
// (CHAOS=long): more rounds, larger fleets, longer storms; see docs/operations.md.
package chaos
