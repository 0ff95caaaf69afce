// Package failover keeps, in the API server, what a new leader of the lease
// API needs from the leaders before it (docs/architecture.md, "Lease
// failover"):
//
//   - the key that signs lease IDs, in a Secret every replica shares
//     (EnsureKey), so that a new leader verifies and re-learns its
//     predecessor's leases from their renewals;
//   - the horizon, a time no lease of a leader expires after, in a ConfigMap
//     whose resourceVersion fences the predecessors off (HorizonStore,
//     ConfigMapHorizon), so that a new leader waits for no longer than it must.
//
// It decides nothing: when to claim, extend and write the horizon is the
// server's (pkg/lease/server's horizon.go), what a lease ID holds is the
// store's. MemoryHorizon keeps the horizon in memory for tests and
// single-process examples.
package failover
