// Package poolintegration tests ProxyPools end to end: the operator binary on a
// real API server, members made by the local provider as real
// forward-proxy processes, probed through themselves, leased through the
// real lease API. It holds tests only.
package poolintegration
