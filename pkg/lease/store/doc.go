// Package store is the lease store: the proxies it may lease, the leases,
// and the fleet's memory around them, all in memory. Proxies come in
// through Upsert and Remove, leases go out through Acquire, RenewAs and
// ReleaseAs.
//
// It is a state machine (docs/decisions/0370-lease-store-components-and-effects.md):
//
//   - The Store keeps the one mutex, the proxies and their selection
//     orders (order.go), the leases by key and by expiry (lease.go) and the
//     term (state.go). Every policy of the fleet's memory is a component
//     that owns its state (policy.go): cool-downs (cooldowns.go), the crawl
//     policies' rules and budgets (rules.go, budgets.go, domainbudgets.go),
//     tiers (tiers.go), the tally of outcomes and burn (tally.go), demand
//     (demand.go), sticky sessions (sessions.go), session state
//     (sessionstate.go) and the bound on the proxies one site bans
//     (sitebans.go). Cool-downs, burn and site bans count a site
//     (Config.Site: every name of its registrable domain), not a host.
//     The store asks each in turn at its decision points and tells each
//     at its apply points.
//   - The decisions (selection in acquire.go, renewals and releases in
//     holders.go, time in store.go's advance) produce effects (effects.go); one
//     apply per effect changes the state (state.go), reading no clock and
//     deciding nothing by map order, so that a store made with
//     Config.Follower reaches the same state from the same effects
//     (Store.Apply). Effects encode to bytes (codec.go) and a Journal
//     receives each, in order.
//
// Lease IDs are signed and self-describing (token.go), so that a new leader
// re-learns live leases from their renewals; between Lead and Abdicate the
// store grants, and nothing beyond its horizon (see HorizonError).
//
// It is pure and clock-injected: it does no I/O, starts no goroutines, and
// imports neither net/http nor client-go (structure_test.go keeps it so),
// so that every decision is tested on a fake clock. It is not the HTTP API
// (pkg/lease/server), not fed by itself (pkg/lease/feed), and not
// persistent: what outlives the process is whatever the journal's reader
// makes of the effects.
package store
