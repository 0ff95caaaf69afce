// Package site is which site a host belongs to: its registrable domain by
// the public suffix list (golang.org/x/net/publicsuffix), the unit bans are
// counted in (docs/decisions/0410-bans-counted-per-site.md). It is a
// package of its own, not part of pkg/hostrule, because the public suffix
// package links in net/http (for net/http/cookiejar's interface), which
// the lease store must not: the store is given Of through its Config.
package site

import (
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Of is the site host belongs to: its registrable domain by the public
// suffix list (shop.example.co.uk and www.example.co.uk are example.co.uk;
// a.github.io and b.github.io are two sites, github.io being a suffix
// under which anyone registers). A site bans, not a host name: its bans
// on any of its names count as one. An IP address, a name that is itself
// a public suffix and a single label (localhost) are their own site. host
// is lower-cased and loses a trailing dot, as a lease's domain does.
func Of(host string) string {
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
