package forwardproxy

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/proxyfleet/proxy-operator/pkg/sessionid"
)

// Exit ranges: one host, many exit addresses. With --exit-range the proxy
// dials every target from an address of a routed prefix (an IPv6 /64, an
// IPv4 range of the host's addresses) chosen by the username's session term:
// the same session leaves from the same address, a new session from a new
// one, no session from a fresh address per connection. See docs/ipv6.md.

// SessionTerm is the username term that names a session: the proxy's
// username followed by "+session-<id>" ("crawler+session-abc"), or
// "session-<id>" alone when the proxy has no credentials. It is the
// gateway's term (pkg/gateway/username.go), with the same id rules.
const SessionTerm = "session-"

// exitSeedVersion is hashed in front of every session, so that a later
// change of the mapping can change it on purpose.
const exitSeedVersion = "proxy-operator exit v1\x00"

// ExitSeed is the 256 bits an exit address is drawn from.
type ExitSeed [sha256.Size]byte

// SessionSeed is the seed of a session: SHA-256 of the session id (behind a
// version string). Pure: the same session, the same seed, in every process
// and after every restart.
func SessionSeed(session string) ExitSeed {
	h := sha256.New()
	h.Write([]byte(exitSeedVersion))
	h.Write([]byte(session))
	var s ExitSeed
	h.Sum(s[:0])
	return s
}

// randomSeed is the seed of a connection without a session.
func randomSeed() ExitSeed {
	var s ExitSeed
	for i := 0; i < len(s); i += 8 {
		binary.LittleEndian.PutUint64(s[i:], rand.Uint64())
	}
	return s
}

// ExitAddr returns the address of ranges that seed picks among those of the
// family of target (IPv4 or IPv6); ok is false when no range is of that
// family. The seed's first 8 bytes pick the range (uniformly by range, not by
// size), the next 16 bytes the address within it. The range's first address
// (the IPv6 subnet-router anycast address, the IPv4 network address) and, in
// IPv4, its last (broadcast) are never chosen in ranges of 4 addresses or
// more. Pure.
func ExitAddr(ranges []netip.Prefix, target netip.Addr, seed ExitSeed) (netip.Addr, bool) {
	is4 := target.Unmap().Is4()
	var fam []netip.Prefix
	for _, r := range ranges {
		if r.Addr().Is4() == is4 {
			fam = append(fam, r)
		}
	}
	if len(fam) == 0 {
		return netip.Addr{}, false
	}
	pick := binary.BigEndian.Uint64(seed[0:8])
	r := fam[pick%uint64(len(fam))]
	hi := binary.BigEndian.Uint64(seed[8:16])
	lo := binary.BigEndian.Uint64(seed[16:24])
	return addrInRange(r, hi, lo), true
}

// addrInRange returns the address of r at the host offset drawn from the
// 128 random bits hi:lo, skipping the reserved first (and IPv4 last)
// address.
func addrInRange(r netip.Prefix, hi, lo uint64) netip.Addr {
	hostBits := r.Addr().BitLen() - r.Bits()
	var offHi, offLo uint64
	switch {
	case hostBits == 0:
	case hostBits < 2:
		offLo = lo & (1<<hostBits - 1)
	case hostBits < 64:
		// Usable offsets: 1 .. 2^hostBits-1, less the IPv4 broadcast.
		n := uint64(1)<<hostBits - 1
		if r.Addr().Is4() {
			n--
		}
		offLo = 1 + lo%n
	default:
		// 64 host bits or more: the bits themselves; the reserved offset
		// 0 comes up once in 2^64 and is moved to 1.
		offLo = lo
		if hostBits < 128 {
			offHi = hi & (1<<(hostBits-64) - 1)
		} else {
			offHi = hi
		}
		if offHi == 0 && offLo == 0 {
			offLo = 1
		}
	}
	return addOffset(r.Masked().Addr(), offHi, offLo)
}

// addOffset returns base + hi:lo (no carry beyond the address: the offset
// fits in the range's host bits).
func addOffset(base netip.Addr, hi, lo uint64) netip.Addr {
	if base.Is4() {
		b := base.As4()
		v := binary.BigEndian.Uint32(b[:]) + uint32(lo)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := base.As16()
	binary.BigEndian.PutUint64(b[0:8], binary.BigEndian.Uint64(b[0:8])|hi)
	binary.BigEndian.PutUint64(b[8:16], binary.BigEndian.Uint64(b[8:16])|lo)
	return netip.AddrFrom16(b)
}

// SplitSession splits a proxy username into the username proper and the
// session id of its trailing "+session-<id>" term (or of a username that is
// only "session-<id>"); session is empty when there is none. A bad id is an
// error naming the term.
func SplitSession(username string) (user, session string, err error) {
	switch {
	case strings.HasPrefix(username, SessionTerm):
		user, session = "", username[len(SessionTerm):]
	case strings.Contains(username, "+"+SessionTerm):
		i := strings.LastIndex(username, "+"+SessionTerm)
		user, session = username[:i], username[i+1+len(SessionTerm):]
	default:
		return username, "", nil
	}
	if reason := checkSession(session); reason != "" {
		return "", "", fmt.Errorf("username term %q: %s", truncate(SessionTerm+session), reason)
	}
	return user, session, nil
}

// checkSession is the gateway's rule for a session id (pkg/sessionid),
// and an id must not be empty.
func checkSession(id string) string {
	if id == "" {
		return "has an empty session id"
	}
	return sessionid.Problem(id)
}

// truncate keeps echoed input short in error messages.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// checkExitRanges refuses exit ranges that cannot be dialled from.
func checkExitRanges(ranges []netip.Prefix) error {
	for _, r := range ranges {
		a := r.Addr()
		if !r.IsValid() || a.Is4In6() || a.Zone() != "" || r != r.Masked() {
			return fmt.Errorf("forwardproxy: exit range %v: want a masked IPv4 or IPv6 CIDR (such as fd00:1::/64)", r)
		}
		if a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
			return fmt.Errorf("forwardproxy: exit range %v: loopback, multicast, link-local and unspecified ranges cannot be exit addresses", r)
		}
	}
	return nil
}
