// Package lease hands crawler workers exclusive, TTL-bound leases on Ready
// proxies (docs/architecture.md, Flow 7): the lease store, the feed that keeps it in step with
// the Proxy informer, and the HTTP API in front of it (docs/api.md).
//
//   - Store is pure and clock-injected: proxies come in through Upsert and
//     Remove, leases go out through Acquire, Renew and Release. Selection
//     walks a list kept in selection order (sticky session first, then least
//     recently released, then lower latency); expiries and cool-downs are
//     heaps; an acquire that waits sleeps until a release, an expiry or a
//     new Ready proxy. It does no I/O and starts no goroutines.
//   - Feed turns Proxy informer events into Upsert and Remove.
//   - Server is the thin net/http layer: strict decoding, authentication and
//     authorization through the Authenticator and Authorizer seams
//     (KubernetesAuth: TokenReview + SubjectAccessReview; NoAuth), JSON
//     errors, leader gating, and the horizon that makes failover safe.
//
// Failover: lease IDs are signed and self-describing, so a new leader
// re-learns live leases from their renewals; it grants nothing until every
// lease its predecessor could have granted has expired or been re-learned,
// which the persisted horizon (HorizonStore) bounds tightly. See
// docs/architecture.md, "Lease failover".
//
// It is not a health checker (it trusts status.phase), not a proxy, and not
// persistent: leases are soft state of the leader.
package lease
