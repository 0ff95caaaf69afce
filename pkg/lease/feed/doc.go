// Package feed keeps the lease store in step with the cluster, through
// informers: Proxies turns Proxy events into the store's Upsert and Remove
// (ProxyInfoFrom is what the store needs of a Proxy), CrawlPolicies turns
// CrawlPolicy events into its per-domain budgets (CrawlPolicyFrom), and
// SecretCredentials reads a leased proxy's credentials through the Secret
// lister when a lease is granted. Every replica runs the feeds, so that a
// standby's store is warm when it starts leading.
//
// It writes nothing to the API server (the CrawlPolicy status writer is
// pkg/crawlpolicy's) and decides nothing about leases: the store does.
package feed
