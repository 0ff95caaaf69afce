// Package hostrule is how a CrawlPolicy rule's host matches a domain, for
// every reader of the rules (the lease store's budgets, the gateway's ban
// detection), so that a domain is always governed by the same rule; and
// which site a host belongs to (Site), the unit bans are counted in.
package hostrule

import (
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

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

// Site is the site host belongs to: its registrable domain by the public
// suffix list (shop.example.co.uk and www.example.co.uk are example.co.uk;
// a.github.io and b.github.io are two sites, github.io being a suffix
// under which anyone registers). A site bans, not a host name: its bans
// on any of its names count as one. An IP address, a name that is itself
// a public suffix and a single label (localhost) are their own site. host
// is lower-cased and loses a trailing dot, as a lease's domain does.
func Site(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return host
	}
	site, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return host
	}
	return site
}
