// Package store is the lease store: the proxies it may lease, the leases,
// cool-downs (per site: hostrule.Site), sticky sessions, crawl-policy
// budgets and their tiers of proxies (tiers.go; the decision is
// pkg/tier's), session state, and the bound on the proxies one site bans
// (sitebans.go), all in memory. Proxies come in through Upsert and Remove, leases go out
// through Acquire, Renew and Release. Selection walks a list kept in
// selection order (sticky session first, then least recently released,
// then lower latency); expiries and cool-downs are heaps; an acquire that
// waits sleeps until a release, an expiry or a new Ready proxy.
//
// Lease IDs are signed and self-describing (token.go), so that a new leader
// re-learns live leases from their renewals; between Lead and Abdicate the
// store grants, and nothing beyond its horizon (see HorizonError).
//
// It is pure and clock-injected: it does no I/O, starts no goroutines, and
// imports neither net/http nor client-go (`go list -deps`), so that every
// decision is tested on a fake clock. It is not the HTTP API
// (pkg/lease/server), not fed by itself (pkg/lease/feed), and not
// persistent: leases are soft state of the leader.
package store
