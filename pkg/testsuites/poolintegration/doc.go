// Package poolintegration tests ProxyPools end to end: the operator binary on a
// real API server, members made by the local provider as real
// forward-proxy processes, probed through themselves, leased through the
// real lease API. It holds tests only.
//
// The tests run in parallel (t.Parallel): each has its own namespace, its
// own operator (which watches only that namespace) and its own local state
// directory, and looks for leaked forward-proxy processes only among those
// started there. They mostly wait for probes, rollouts and leases, so
// side by side they take little more CPU than one after the other.
package poolintegration
