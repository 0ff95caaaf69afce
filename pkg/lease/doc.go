// Package lease is the map of the lease API (docs/architecture.md, Flow 7;
// docs/api.md): crawler workers get exclusive, TTL-bound leases on Ready
// proxies. It holds no code; each job is a package of its own:
//
//   - store: the lease store, pure and clock-injected (no net/http, no
//     client-go): proxies in, leases out, sessions, cool-downs, budgets,
//     session state, signed lease IDs and their re-learning by a new leader;
//   - server: the net/http API in front of the store: routing, strict
//     decoding, authentication and authorization calls, error mapping,
//     leader gating and the horizon a term keeps persisted;
//   - auth: who calls and what they may do (TokenReview, SubjectAccessReview);
//   - feed: the informers that keep the store in step (Proxies, CrawlPolicies)
//     and the credentials a grant or renewal hands out, signed for the
//     lease where the instance checks them (pkg/leasecred);
//   - push: the leader's pushes of leases' early ends and renewals to the
//     instances that check their credentials;
//   - failover: what a new leader needs of the old, in the API server (the
//     lease ID key's Secret, the horizon's ConfigMap);
//   - wire and client: the API's JSON types and a Go client for crawlers.
//
// None of it is a health checker (it trusts status.phase), a proxy, or
// persistent: leases are soft state of the leader. The proxies that check
// lease credentials (our forward-proxy) hold them to their leases; on any
// other proxy a lease is advisory (docs/api.md, "What a lease guarantees").
package lease
