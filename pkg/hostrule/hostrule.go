// Package hostrule is how a CrawlPolicy rule's host matches a domain, for
// every reader of the rules (the lease store's budgets, the gateway's ban
// detection), so that a domain is always governed by the same rule. Which
// site a host belongs to, the unit bans are counted in, is pkg/hostrule/site.
package hostrule

import "strings"

// NormalizeDomain lower-cases a domain and drops a trailing dot, so that
// rules, cool-downs and bans match however a client spells the name.
func NormalizeDomain(domain string) string {
	return strings.TrimSuffix(strings.ToLower(domain), ".")
}

// How specifically a rule's host matches a domain; a higher rank wins, and
// between two suffixes the longer. A policy's default rule ranks Default.
const (
	NoMatch = 0
	Default = 1
	Suffix  = 2
	Exact   = 3
)

// Rank is how host ("shop.example", or "*.example" for example and every
// name under it) matches domain (lower case, no port).
func Rank(host, domain string) int {
	switch {
	case host == domain:
		return Exact
	case strings.HasPrefix(host, "*.") && (domain == host[2:] || strings.HasSuffix(domain, host[1:])):
		return Suffix
	default:
		return NoMatch
	}
}

// Better says whether a match of rank and host length n beats the best so
// far (bestRank, bestLen).
func Better(rank, n, bestRank, bestLen int) bool {
	return rank > bestRank || (rank == bestRank && n > bestLen)
}
