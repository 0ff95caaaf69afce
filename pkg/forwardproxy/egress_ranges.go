package forwardproxy

import (
	"cmp"
	"net/netip"
	"slices"
)

// AllowedRange is a range the guard allows, less the ranges in Except: the
// shape of a NetworkPolicy ipBlock, which the kubernetes provider writes so
// that the cluster's network enforces the guard a second time.
type AllowedRange struct {
	Prefix netip.Prefix
	Except []netip.Prefix // each strictly inside Prefix
}

// AllowedRanges returns the addresses Check allows as a union of ranges with
// exceptions, IPv4 first, then IPv6. Pure.
//
// Every address lies in the most specific of the policy's ranges (the
// default rules, the allow and deny ranges, 0.0.0.0/0 and ::/0) that
// contains it, and outside all of that range's smaller ones; Check gives
// every address of that region the same verdict by ranges, so the region
// is judged by one address of it. Two refinements of Check are not ranges and are
// left out: an admitted IPv6 range that embeds a refused IPv4 address
// (NAT64, 6to4, Teredo) counts as admitted, and addresses outside every
// named range that are not global unicast do not occur (the default rules
// name them all).
func (p EgressPolicy) AllowedRanges() []AllowedRange {
	var all []netip.Prefix
	all = append(all, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"))
	for _, r := range DefaultEgressDenyRules {
		all = append(all, r.Prefix)
	}
	all = append(all, p.Allow...)
	all = append(all, p.Deny...)
	slices.SortFunc(all, comparePrefixes)
	all = slices.Compact(all)

	var out []AllowedRange
	for _, outer := range all {
		var inside []netip.Prefix
		for _, q := range all {
			if q != outer && q.Bits() > outer.Bits() && outer.Contains(q.Addr()) {
				inside = append(inside, q)
			}
		}
		a, ok := regionAddr(outer, inside)
		if !ok || !p.rangeVerdict(a).Allowed {
			continue
		}
		out = append(out, AllowedRange{Prefix: outer, Except: outermost(inside)})
	}
	return out
}

// regionAddr returns an address of outer outside every range of inside, if
// there is one. The region's addresses form gaps between the inside ranges;
// each gap starts at outer's first address or right after an inside range.
func regionAddr(outer netip.Prefix, inside []netip.Prefix) (netip.Addr, bool) {
	candidates := []netip.Addr{outer.Addr()}
	for _, q := range inside {
		if next := lastAddr(q).Next(); next.IsValid() {
			candidates = append(candidates, next)
		}
	}
	for _, c := range candidates {
		if outer.Contains(c) && !slices.ContainsFunc(inside, func(q netip.Prefix) bool { return q.Contains(c) }) {
			return c, true
		}
	}
	return netip.Addr{}, false
}

// outermost drops the ranges that lie inside another of the list: an
// exception need not repeat what a larger one already takes out.
func outermost(ranges []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, q := range ranges {
		if !slices.ContainsFunc(ranges, func(r netip.Prefix) bool {
			return r != q && r.Bits() < q.Bits() && r.Contains(q.Addr())
		}) {
			out = append(out, q)
		}
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// comparePrefixes orders IPv4 before IPv6, then by address, then wider first.
func comparePrefixes(a, b netip.Prefix) int {
	if a.Addr().Is4() != b.Addr().Is4() {
		if a.Addr().Is4() {
			return -1
		}
		return 1
	}
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}
