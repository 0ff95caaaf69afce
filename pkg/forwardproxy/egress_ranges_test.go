package forwardproxy_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func allowedBy(ranges []forwardproxy.AllowedRange, a netip.Addr) bool {
	return slices.ContainsFunc(ranges, func(r forwardproxy.AllowedRange) bool {
		return r.Prefix.Contains(a) && !slices.ContainsFunc(r.Except, func(e netip.Prefix) bool { return e.Contains(a) })
	})
}

// The ranges admit exactly the addresses Check admits, for the default
// policy and for allow and deny ranges nested in every way: checked on every
// range's edges and on random addresses of every range.
func TestAllowedRangesAgreeWithCheck(t *testing.T) {
	policies := map[string]forwardproxy.EgressPolicy{
		"default":               {},
		"the Pod range":         {Allow: prefixes("10.244.0.0/16")},
		"one address":           {Allow: prefixes("192.0.2.2/32")},
		"allow in deny":         {Allow: prefixes("10.0.0.0/8", "10.1.2.0/24"), Deny: prefixes("10.1.0.0/16", "10.1.2.128/25")},
		"tie":                   {Allow: prefixes("10.5.0.0/16"), Deny: prefixes("10.5.0.0/16")},
		"broad allow, metadata": {Allow: prefixes("0.0.0.0/0", "169.254.0.0/16")},
		"the metadata server":   {Allow: prefixes("169.254.169.254/32")},
		"public deny":           {Deny: prefixes("8.8.8.0/24", "2001:4860::/32")},
		"ipv6":                  {Allow: prefixes("fd00:1::/64")},
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			ranges := p.AllowedRanges()
			var probes []netip.Addr
			var edges []netip.Prefix
			edges = append(edges, p.Allow...)
			edges = append(edges, p.Deny...)
			for _, r := range forwardproxy.DefaultEgressDenyRules {
				edges = append(edges, r.Prefix)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, e := range edges {
				first := e.Masked().Addr()
				probes = append(probes, first, first.Prev())
				for range 20 {
					probes = append(probes, randomIn(rng, e))
				}
			}
			for range 2000 {
				probes = append(probes, randomIn(rng, prefixes("0.0.0.0/0")[0]), randomIn(rng, prefixes("2000::/3")[0]))
			}
			for _, a := range probes {
				if !a.IsValid() || a.Is4In6() {
					continue
				}
				v := p.Check(a)
				if v.Via.IsValid() {
					continue // refused for an embedded IPv4 address: not a range (AllowedRanges)
				}
				if got := allowedBy(ranges, a); got != v.Allowed {
					t.Errorf("%s: in the ranges %v, Check says %s", a, got, v)
				}
			}
		})
	}
}

// The default policy, as a NetworkPolicy shows it: all of IPv4 and IPv6
// less the refused ranges, listed by their outermost.
func TestAllowedRangesOfTheDefaultPolicy(t *testing.T) {
	got := forwardproxy.EgressPolicy{}.AllowedRanges()
	want := []forwardproxy.AllowedRange{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Except: prefixes(
			"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "168.63.129.16/32",
			"169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
			"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4")},
		{Prefix: netip.MustParsePrefix("::/0"), Except: prefixes(
			"::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
			"2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8")},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("AllowedRanges (-want +got):\n%s", diff)
	}
}

// An allow range inside a refused one is its own range; a metadata server
// stays out of a broad allow range.
func TestAllowedRangesOfAllowRanges(t *testing.T) {
	p := forwardproxy.EgressPolicy{Allow: prefixes("169.254.0.0/16", "10.244.0.0/16"), Deny: prefixes("10.244.9.0/24")}
	var got []string
	for _, r := range p.AllowedRanges() {
		if r.Prefix.Addr().Is4() && r.Prefix.Bits() > 0 {
			s := r.Prefix.String()
			for _, e := range r.Except {
				s += " -" + e.String()
			}
			got = append(got, s)
		}
	}
	want := []string{"10.244.0.0/16 -10.244.9.0/24", "169.254.0.0/16 -169.254.169.253/32 -169.254.169.254/32 -169.254.170.2/32"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allow ranges (-want +got):\n%s", diff)
	}
}

func randomIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		if rng.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
