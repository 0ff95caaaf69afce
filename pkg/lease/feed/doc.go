// Package feed keeps the lease store in step with the cluster, through
// informers: Proxies turns Proxy events into the store's Upsert and Remove
// (ProxyInfoFrom is what the store needs of a Proxy), CrawlPolicies turns
// CrawlPolicy events into its per-domain budgets (CrawlPolicyFrom), and
// LeaseCredentials reads a leased proxy's credentials through the Proxy and
// Secret listers when a lease is granted or renewed, signed for the lease
// when the proxy's instance checks them (pkg/leasecred). Every replica runs the feeds, so that a
// standby's store is warm when it starts leading.
//
// It writes nothing to the API server (the CrawlPolicy status writer is
// pkg/crawlpolicy's) and decides nothing about leases: the store does.
package feed
