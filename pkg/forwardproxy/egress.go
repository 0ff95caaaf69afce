package forwardproxy

import (
	"fmt"
	"net/netip"
	"strings"
)

// The egress guard: which addresses the proxy may dial. A proxy that runs in
// a cluster or a cloud network must not be a door into it (the Kubernetes
// API, Services, the node's and the cloud's metadata servers, private
// networks, loopback), so every internal range is refused unless the
// operator of the proxy admits it with an allow range. The decision is made
// on the address actually dialled, after DNS, so a name that resolves (or
// re-resolves, DNS rebinding) to an internal address does not pass.

// Rule names of verdicts that are not one of the default ranges.
const (
	// RuleDefault: no range matched and the address is global unicast.
	RuleDefault = "default"
	// RuleAllowCIDR: a range of [Config.AllowCIDRs] admitted the address.
	RuleAllowCIDR = "allow-cidr"
	// RuleDenyCIDR: a range of [Config.DenyCIDRs] refused the address.
	RuleDenyCIDR = "deny-cidr"
	// RuleNotGlobalUnicast: no range matched, but the address is not a
	// global unicast address (a catch-all behind the named ranges).
	RuleNotGlobalUnicast = "not-global-unicast"
	// RuleExitRange: the address is in one of the proxy's own exit ranges
	// ([EgressPolicy.Own]).
	RuleExitRange = "exit-range"
)

// EgressRule is one range the guard refuses by default.
type EgressRule struct {
	// Name is the rule's name in refusals, logs and the metric's rule label.
	Name string
	// Prefix is the refused range.
	Prefix netip.Prefix
	// What says what lives there, for the refusal's text.
	What string
	// Explicit rules yield only to an allow range at least as specific as
	// their own prefix: --allow-cidr=0.0.0.0/0 or 169.254.0.0/16 does not
	// open a metadata server, --allow-cidr=169.254.169.254/32 does.
	Explicit bool
}

// DefaultEgressDenyRules are the ranges refused unless an allow range admits
// them, most specific first (the first that contains an address names the
// refusal). IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are judged as the
// IPv4 address they map, and IPv6 forms that embed an IPv4 address (NAT64,
// 6to4, Teredo, IPv4-compatible, IPv4-translated) are refused themselves and,
// when admitted, still refused if the embedded address is.
var DefaultEgressDenyRules = []EgressRule{
	// Cloud metadata servers hand out instance credentials: named apart so
	// that a refusal says so, and explicit, so that a broad allow range
	// does not open them by accident.
	metadata("169.254.169.254/32", "a cloud metadata server (AWS, GCE, Azure, OpenStack, Oracle)"),
	metadata("169.254.170.2/32", "the AWS ECS task metadata endpoint"),
	metadata("169.254.169.253/32", "the AWS VPC DNS resolver and time service"),
	metadata("100.100.100.200/32", "the Alibaba Cloud metadata server"),
	metadata("168.63.129.16/32", "the Azure WireServer (host agent and metadata)"),
	metadata("fd00:ec2::254/128", "the AWS metadata server over IPv6"),

	// IPv4 (RFC 6890 and its updates).
	rule("unspecified", "0.0.0.0/32", "the unspecified address (Linux connects it to the local host)"),
	rule("this-network", "0.0.0.0/8", "\"this network\" (RFC 791)"),
	rule("loopback", "127.0.0.0/8", "loopback"),
	rule("private", "10.0.0.0/8", "a private network (RFC 1918)"),
	rule("private", "172.16.0.0/12", "a private network (RFC 1918)"),
	rule("private", "192.168.0.0/16", "a private network (RFC 1918)"),
	rule("cgnat", "100.64.0.0/10", "shared address space for carrier-grade NAT (RFC 6598)"),
	rule("link-local", "169.254.0.0/16", "link-local (RFC 3927)"),
	rule("ietf-protocol", "192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
	rule("documentation", "192.0.2.0/24", "documentation (TEST-NET-1, RFC 5737)"),
	rule("documentation", "198.51.100.0/24", "documentation (TEST-NET-2, RFC 5737)"),
	rule("documentation", "203.0.113.0/24", "documentation (TEST-NET-3, RFC 5737)"),
	rule("benchmarking", "198.18.0.0/15", "network benchmarking (RFC 2544)"),
	rule("6to4-relay", "192.88.99.0/24", "the deprecated 6to4 relay anycast (RFC 7526)"),
	rule("multicast", "224.0.0.0/4", "multicast"),
	rule("broadcast", "255.255.255.255/32", "limited broadcast"),
	rule("reserved", "240.0.0.0/4", "reserved (RFC 1112)"),

	// IPv6 (the IANA special-purpose registry).
	rule("unspecified", "::/128", "the unspecified address"),
	rule("loopback", "::1/128", "loopback"),
	rule("ipv4-compatible", "::/96", "a deprecated IPv4-compatible address (RFC 4291)"),
	rule("ipv4-translated", "::ffff:0:0:0/96", "an IPv4-translated address (RFC 2765)"),
	rule("nat64", "64:ff9b::/96", "NAT64 (RFC 6052), which reaches the IPv4 address it embeds"),
	rule("nat64", "64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
	rule("discard", "100::/64", "discard-only (RFC 6666)"),
	rule("teredo", "2001::/32", "Teredo (RFC 4380), a tunnel to the IPv4 addresses it embeds"),
	rule("ietf-protocol", "2001::/23", "IETF protocol assignments (RFC 2928)"),
	rule("documentation", "2001:db8::/32", "documentation (RFC 3849)"),
	rule("documentation", "3fff::/20", "documentation (RFC 9637)"),
	rule("6to4", "2002::/16", "6to4 (RFC 3056), which reaches the IPv4 address it embeds"),
	rule("segment-routing", "5f00::/16", "SRv6 segment identifiers (RFC 9602)"),
	rule("unique-local", "fc00::/7", "a unique local (private) network (RFC 4193)"),
	rule("link-local", "fe80::/10", "link-local"),
	rule("site-local", "fec0::/10", "deprecated site-local (RFC 3879)"),
	rule("multicast", "ff00::/8", "multicast"),
}

// RuleMetadata names the cloud metadata servers' rules.
const RuleMetadata = "metadata"

func rule(name, prefix, what string) EgressRule {
	return EgressRule{Name: name, Prefix: netip.MustParsePrefix(prefix), What: what}
}

func metadata(prefix, what string) EgressRule {
	r := rule(RuleMetadata, prefix, what)
	r.Explicit = true
	return r
}

// EgressVerdict is the guard's decision on one address.
type EgressVerdict struct {
	// Addr is the address judged: zone removed, IPv4-mapped addresses as
	// the IPv4 address.
	Addr netip.Addr
	// Allowed says whether the proxy may dial it.
	Allowed bool
	// Rule names what decided: RuleDefault, RuleAllowCIDR, RuleDenyCIDR,
	// RuleNotGlobalUnicast or the Name of a default rule.
	Rule string
	// Prefix is the range that decided (invalid for RuleDefault and
	// RuleNotGlobalUnicast).
	Prefix netip.Prefix
	// What says what lives in the range (default rules only).
	What string
	// Via is the IPv6 address that embeds Addr, when the refusal is of the
	// embedded IPv4 address (NAT64, 6to4, ...); invalid otherwise.
	Via netip.Addr
}

// String describes the verdict for a refusal's text and the logs.
func (v EgressVerdict) String() string {
	var b strings.Builder
	if v.Via.IsValid() {
		fmt.Fprintf(&b, "%s embeds %s, which ", v.Via, v.Addr)
	} else {
		fmt.Fprintf(&b, "%s ", v.Addr)
	}
	verb := "is refused"
	if v.Allowed {
		verb = "is allowed"
	}
	fmt.Fprintf(&b, "%s by rule %s", verb, v.Rule)
	switch {
	case v.Prefix.IsValid() && v.What != "":
		fmt.Fprintf(&b, " (%s: %s)", v.Prefix, v.What)
	case v.Prefix.IsValid():
		fmt.Fprintf(&b, " (%s)", v.Prefix)
	}
	return b.String()
}

// EgressPolicy is the guard: the default rules adjusted by allow and deny
// ranges. Of the allow and deny ranges that contain an address, the most
// specific (longest prefix) decides, a deny range winning a tie; when none
// does, the default rules refuse, and anything else that is global unicast
// is allowed. The zero value is the default policy.
type EgressPolicy struct {
	Allow []netip.Prefix
	Deny  []netip.Prefix
	// Own are the proxy's exit ranges ([Config.ExitRanges]): routed to
	// its host as local, so a connection to them reaches the host's own
	// services, like loopback. Refused whatever Allow says; AllowedRanges
	// leaves them out.
	Own []netip.Prefix
}

// NewEgressPolicy returns the policy of the given ranges, normalised: masked,
// and IPv4-mapped IPv6 ranges (::ffff:10.0.0.0/104) turned into the IPv4
// ranges they map, since addresses are judged unmapped. It refuses invalid
// prefixes.
func NewEgressPolicy(allow, deny []netip.Prefix) (EgressPolicy, error) {
	var p EgressPolicy
	for _, l := range []struct {
		name string
		in   []netip.Prefix
		out  *[]netip.Prefix
	}{{"allow", allow, &p.Allow}, {"deny", deny, &p.Deny}} {
		for _, pfx := range l.in {
			n, err := normalizePrefix(pfx)
			if err != nil {
				return EgressPolicy{}, fmt.Errorf("forwardproxy: %s range: %w", l.name, err)
			}
			*l.out = append(*l.out, n)
		}
	}
	return p, nil
}

// ParseCIDR parses a range as the flags and the Proxy API write it
// ("10.0.0.0/8", "fd00::/8"; a bare address is a single-address range).
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range or an IP address", s)
		}
		return normalizePrefix(netip.PrefixFrom(a, a.BitLen()))
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range: %v", s, err)
	}
	return normalizePrefix(p)
}

func normalizePrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, fmt.Errorf("invalid prefix %v", p)
	}
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked(), nil
	}
	return netip.PrefixFrom(a, p.Bits()).Masked(), nil
}

// Check decides whether the proxy may dial a. Pure.
func (p EgressPolicy) Check(a netip.Addr) EgressVerdict {
	a = a.WithZone("").Unmap()
	if !a.IsValid() {
		return EgressVerdict{Addr: a, Rule: RuleNotGlobalUnicast}
	}
	for _, r := range p.Own {
		if r.Contains(a) {
			return EgressVerdict{Addr: a, Rule: RuleExitRange, Prefix: r, What: "this proxy's own exit range, local to its host"}
		}
	}
	// An address that reaches an embedded IPv4 address is no better than
	// that address.
	for _, inner := range embeddedIPv4(a) {
		if v := p.Check(inner); !v.Allowed {
			v.Via = a
			return v
		}
	}
	return p.rangeVerdict(a)
}

// rangeVerdict is Check's decision by the ranges that contain a alone, a
// unmapped and valid.
func (p EgressPolicy) rangeVerdict(a netip.Addr) EgressVerdict {
	user, matched := p.userRange(a)
	for _, r := range DefaultEgressDenyRules {
		if !r.Prefix.Contains(a) {
			continue
		}
		if matched && (!r.Explicit || user.Prefix.Bits() >= r.Prefix.Bits()) {
			break
		}
		return EgressVerdict{Addr: a, Rule: r.Name, Prefix: r.Prefix, What: r.What}
	}
	if matched {
		return user
	}
	if !a.IsGlobalUnicast() {
		return EgressVerdict{Addr: a, Rule: RuleNotGlobalUnicast}
	}
	return EgressVerdict{Addr: a, Allowed: true, Rule: RuleDefault}
}

// userRange returns the verdict of the most specific allow or deny range
// containing a; ok is false when none does.
func (p EgressPolicy) userRange(a netip.Addr) (v EgressVerdict, ok bool) {
	best := -1
	for _, l := range []struct {
		ranges []netip.Prefix
		allow  bool
	}{{p.Allow, true}, {p.Deny, false}} {
		for _, r := range l.ranges {
			if !r.Contains(a) {
				continue
			}
			if r.Bits() > best || (r.Bits() == best && !l.allow) {
				best = r.Bits()
				v = EgressVerdict{Addr: a, Allowed: l.allow, Rule: RuleDenyCIDR, Prefix: r}
				if l.allow {
					v.Rule = RuleAllowCIDR
				}
			}
		}
	}
	return v, best >= 0
}

var (
	nat64Prefix          = netip.MustParsePrefix("64:ff9b::/96")
	ipv4CompatiblePrefix = netip.MustParsePrefix("::/96")
	ipv4TranslatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96")
	sixToFourPrefix      = netip.MustParsePrefix("2002::/16")
	teredoPrefix         = netip.MustParsePrefix("2001::/32")
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address reaches by
// construction: the last 32 bits of NAT64, IPv4-compatible and
// IPv4-translated addresses, bits 16-47 of 6to4, and Teredo's server and
// (inverted) client addresses.
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case nat64Prefix.Contains(a), ipv4TranslatedPrefix.Contains(a):
		return []netip.Addr{last}
	case ipv4CompatiblePrefix.Contains(a):
		if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
			return nil
		}
		return []netip.Addr{last}
	case sixToFourPrefix.Contains(a):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredoPrefix.Contains(a):
		client := [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	return nil
}
