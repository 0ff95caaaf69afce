package forwardproxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

func seedOf(b ...byte) forwardproxy.ExitSeed {
	var s forwardproxy.ExitSeed
	copy(s[:], b)
	return s
}

// seedHost is a seed whose range pick is pick and whose low 64 random bits
// are lo.
func seedHost(pick byte, lo uint64) forwardproxy.ExitSeed {
	var s forwardproxy.ExitSeed
	s[7] = pick
	for i := range 8 {
		s[16+i] = byte(lo >> (56 - 8*i))
	}
	return s
}

func TestExitAddr(t *testing.T) {
	v6 := netip.MustParseAddr("2606:4700::1111")
	v4 := netip.MustParseAddr("93.184.215.14")
	mapped := netip.MustParseAddr("::ffff:93.184.215.14")
	tests := map[string]struct {
		ranges []netip.Prefix
		target netip.Addr
		seed   forwardproxy.ExitSeed
		want   string // "" for no address
	}{
		"/64 takes the low 64 bits":      {prefixes("fd00:5e55:1::/64"), v6, seedHost(0, 0x0123456789abcdef), "fd00:5e55:1:0:123:4567:89ab:cdef"},
		"/64 never the anycast address":  {prefixes("fd00:5e55:1::/64"), v6, seedHost(0, 0), "fd00:5e55:1::1"},
		"/48 uses 16 bits of hi too":     {prefixes("fd00:5e55::/48"), v6, func() forwardproxy.ExitSeed { s := seedHost(0, 7); s[15] = 0x42; return s }(), "fd00:5e55:0:42::7"},
		"/128 is its one address":        {prefixes("2001:db8::9/128"), v6, seedHost(0, 12345), "2001:db8::9"},
		"/126 skips offset 0":            {prefixes("fd00::/126"), v6, seedHost(0, 2), "fd00::3"},
		"/30 skips network+broadcast":    {prefixes("198.51.100.0/30"), v4, seedHost(0, 1), "198.51.100.2"},
		"/30 wraps within usable":        {prefixes("198.51.100.0/30"), v4, seedHost(0, 2), "198.51.100.1"},
		"/31 uses both":                  {prefixes("198.51.100.0/31"), v4, seedHost(0, 1), "198.51.100.1"},
		"/32 is its one address":         {prefixes("198.51.100.7/32"), v4, seedHost(0, 99), "198.51.100.7"},
		"/24 never .0 or .255":           {prefixes("198.51.100.0/24"), v4, seedHost(0, 253), "198.51.100.254"},
		"pick chooses the second range":  {prefixes("198.51.100.7/32", "198.51.100.9/32"), v4, seedHost(1, 0), "198.51.100.9"},
		"family: IPv4 target, v4 range":  {prefixes("fd00:5e55:1::/64", "198.51.100.7/32"), v4, seedHost(0, 0), "198.51.100.7"},
		"family: mapped target is IPv4":  {prefixes("fd00:5e55:1::/64", "198.51.100.7/32"), mapped, seedHost(0, 0), "198.51.100.7"},
		"no IPv4 range for IPv4 target":  {prefixes("fd00:5e55:1::/64"), v4, seedOf(1), ""},
		"no IPv6 range for IPv6 target":  {prefixes("198.51.100.0/24"), v6, seedOf(1), ""},
		"no ranges at all":               {nil, v6, seedOf(1), ""},
		"high seed bits beyond the host": {prefixes("fd00:5e55:1::/64"), v6, func() forwardproxy.ExitSeed { s := seedHost(0, 5); s[8] = 0xff; return s }(), "fd00:5e55:1::5"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := forwardproxy.ExitAddr(tc.ranges, tc.target, tc.seed)
			gotS := ""
			if ok {
				gotS = got.String()
			}
			if diff := cmp.Diff(tc.want, gotS); diff != "" {
				t.Errorf("ExitAddr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExitAddrSpreadsSmallRange: every usable address of a /29 comes up,
// and no reserved one, over many sessions.
func TestExitAddrSpreadsSmallRange(t *testing.T) {
	r := prefixes("198.51.100.8/29")
	seen := map[string]bool{}
	for i := range 1000 {
		a, _ := forwardproxy.ExitAddr(r, netip.MustParseAddr("93.184.215.14"), forwardproxy.SessionSeed("s"+strconv.Itoa(i)))
		seen[a.String()] = true
	}
	want := map[string]bool{}
	for i := 9; i <= 14; i++ {
		want["198.51.100."+strconv.Itoa(i)] = true
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("addresses of 198.51.100.8/29 chosen (-want +got):\n%s", diff)
	}
}

func TestSessionSeedIsStable(t *testing.T) {
	// Pinned: the mapping of a session to an address survives restarts
	// and releases; changing it moves every session's exit address.
	a, _ := forwardproxy.ExitAddr(prefixes("fd00:5e55:1::/64"), netip.MustParseAddr("2606:4700::1111"), forwardproxy.SessionSeed("abc"))
	b, _ := forwardproxy.ExitAddr(prefixes("fd00:5e55:1::/64"), netip.MustParseAddr("2606:4700::1111"), forwardproxy.SessionSeed("abc"))
	c, _ := forwardproxy.ExitAddr(prefixes("fd00:5e55:1::/64"), netip.MustParseAddr("2606:4700::1111"), forwardproxy.SessionSeed("abd"))
	if a != b || a == c {
		t.Errorf("session abc → %s and %s, abd → %s: want the same twice and another for abd", a, b, c)
	}
}

func TestSplitSession(t *testing.T) {
	type split struct{ User, Session string }
	tests := map[string]struct {
		in      string
		want    split
		wantErr string // a substring of the error; "" for none
	}{
		"plain username":         {in: "crawler", want: split{User: "crawler"}},
		"username and session":   {in: "crawler+session-abc", want: split{User: "crawler", Session: "abc"}},
		"session only":           {in: "session-abc", want: split{Session: "abc"}},
		"dashes in the id":       {in: "crawler+session-a-b-c", want: split{User: "crawler", Session: "a-b-c"}},
		"last session term wins": {in: "a+session-x+session-y", want: split{User: "a+session-x", Session: "y"}},
		"plus in the username":   {in: "a+b+session-1", want: split{User: "a+b", Session: "1"}},
		"empty id":               {in: "crawler+session-", wantErr: `username term "session-": has an empty session id`},
		"space in id":            {in: "crawler+session-a b", wantErr: `username term "session-a b": the session id must not contain spaces`},
		"too long":               {in: "session-" + strings.Repeat("x", 254), wantErr: "the session id is longer than 253 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u, s, err := forwardproxy.SplitSession(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("SplitSession(%q) = %q, %q, %v; want an error containing %q", tc.in, u, s, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SplitSession(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, split{u, s}); diff != "" {
				t.Errorf("SplitSession(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// sourceSeam records the exit address the proxy chose for each dial and
// fails the dial: nothing leaves this process.
type sourceSeam struct {
	mu      sync.Mutex
	sources []netip.Addr
	targets []string
}

func (s *sourceSeam) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	src, _ := forwardproxy.DialSource(ctx)
	s.mu.Lock()
	s.sources = append(s.sources, src)
	s.targets = append(s.targets, addr)
	s.mu.Unlock()
	return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("source seam: not dialling")}
}

func (s *sourceSeam) take() (sources []netip.Addr, targets []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sources, targets = s.sources, s.targets
	s.sources, s.targets = nil, nil
	return sources, targets
}

var exitNames = map[string][][]string{
	"v6.example":      {{"2606:4700::1111"}},
	"v4only.example":  {{"93.184.215.14"}},
	"dual.example":    {{"93.184.215.14", "2606:4700::1111"}},
	"v6-ula.example":  {{"fd00:5e55:eeee::1"}},
	"v6-link.example": {{"fe80::1"}},
}

func startRangedProxy(t *testing.T, seam *sourceSeam, ranges ...string) *proxytest.Proxy {
	return startProxy(t, proxytest.Options{
		Username: "crawler", Password: "pw", DefaultEgress: true,
		Configure: func(c *forwardproxy.Config) {
			c.ExitRanges = prefixes(ranges...)
			c.DialContext = seam.dial
			c.Resolver = newFakeResolver(exitNames)
		},
	})
}

// ask sends one CONNECT or plain GET with the username user and returns
// the status and body.
func ask(t *testing.T, proxyAddr, method, authority, user string) (int, string) {
	t.Helper()
	auth := "Proxy-Authorization: " + basic(user, "pw") + "\r\n"
	raw := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n" + auth + "\r\n"
	if method == http.MethodGet {
		raw = "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\n" + auth + "Connection: close\r\n\r\n"
	}
	resp, body := dial(t, proxyAddr).roundTrip(raw)
	return resp.StatusCode, body
}

// TestExitRangeSessionPicksSource drives a ranged proxy by CONNECT and by
// plain HTTP: each session's dials come from one address of the range, 64
// sessions from 64 addresses, and connections without a session from a
// new address each.
func TestExitRangeSessionPicksSource(t *testing.T) {
	seam := &sourceSeam{}
	p := startRangedProxy(t, seam, "fd00:5e55:1::/64", "198.51.100.7/32")
	rng := netip.MustParsePrefix("fd00:5e55:1::/64")
	for _, method := range []string{http.MethodConnect, http.MethodGet} {
		t.Run(method, func(t *testing.T) {
			distinct := map[netip.Addr]bool{}
			for i := range 64 {
				user := "crawler+session-s" + strconv.Itoa(i)
				ask(t, p.Addr, method, "v6.example:443", user)
				ask(t, p.Addr, method, "v6.example:443", user)
				src, _ := seam.take()
				if len(src) != 2 || src[0] != src[1] || !rng.Contains(src[0]) {
					t.Fatalf("session s%d dialled from %v: want one address of %s, twice", i, src, rng)
				}
				distinct[src[0]] = true
			}
			if len(distinct) != 64 {
				t.Errorf("64 sessions left from %d distinct addresses; want 64", len(distinct))
			}
			ask(t, p.Addr, method, "v6.example:443", "crawler")
			ask(t, p.Addr, method, "v6.example:443", "crawler")
			src, _ := seam.take()
			if len(src) != 2 || src[0] == src[1] || !rng.Contains(src[0]) || !rng.Contains(src[1]) {
				t.Errorf("two connections without a session dialled from %v: want two different addresses of %s", src, rng)
			}
			// A dual-stack name is dialled on both families, each from
			// the session's address of that family.
			ask(t, p.Addr, method, "dual.example:443", "crawler+session-d")
			src, targets := seam.take()
			if diff := cmp.Diff([]string{"93.184.215.14:443", "[2606:4700::1111]:443"}, targets); diff != "" || src[0] != netip.MustParseAddr("198.51.100.7") {
				t.Errorf("dual-stack: dialled %v from %v; want both families, IPv4 from 198.51.100.7 (-want +got targets):\n%s", targets, src, diff)
			}
		})
	}
}

// TestExitRangeRefusals: a ranged proxy still refuses internal IPv6
// destinations (403 naming the rule), answers 502 naming the range for a
// target without an address of the ranges' family, and reads the session
// term strictly; nothing is dialled in any of these.
func TestExitRangeRefusals(t *testing.T) {
	seam := &sourceSeam{}
	p := startRangedProxy(t, seam, "fd00:5e55:1::/64")
	tests := map[string]struct {
		authority, user string
		status          int
		body            string
	}{
		"loopback ::1":         {"[::1]:443", "crawler+session-a", 403, "by rule loopback"},
		"unique local literal": {"[fd00:5e55:eeee::1]:443", "crawler+session-a", 403, "by rule unique-local"},
		"unique local by name": {"v6-ula.example:443", "crawler", 403, "by rule unique-local"},
		"link-local by name":   {"v6-link.example:443", "crawler+session-a", 403, "by rule link-local"},
		"own exit range":       {"[fd00:5e55:1::1]:443", "crawler+session-a", 403, "by rule exit-range (fd00:5e55:1::/64: this proxy's own exit range, local to its host)"},
		"IPv4-only target":     {"v4only.example:443", "crawler+session-a", 502, "v4only.example has no IPv6 (AAAA) address, the family of the exit ranges fd00:5e55:1::/64"},
		"IPv4 literal":         {"93.184.215.14:443", "crawler", 502, "has no IPv6 (AAAA) address"},
		"bad session term":     {"v6.example:443", "crawler+session-", 400, `username term "session-": has an empty session id`},
		"session, wrong user":  {"v6.example:443", "other+session-a", 407, "proxy authentication required"},
	}
	for name, tc := range tests {
		for _, method := range []string{http.MethodConnect, http.MethodGet} {
			t.Run(name+"/"+method, func(t *testing.T) {
				status, body := ask(t, p.Addr, method, tc.authority, tc.user)
				if status != tc.status || !strings.Contains(body, tc.body) {
					t.Errorf("%s %s as %s: %d %q; want %d containing %q", method, tc.authority, tc.user, status, body, tc.status, tc.body)
				}
				if _, targets := seam.take(); len(targets) > 0 {
					t.Errorf("dialled %v; want nothing dialled", targets)
				}
			})
		}
	}
}

// TestExitRangeRefusesOwnRange: the exit ranges are local to the host, so
// a connection into them reaches its services; refused even when an allow
// range admits them, while the rest of the allow range stays open.
func TestExitRangeRefusesOwnRange(t *testing.T) {
	seam := &sourceSeam{}
	p := startProxy(t, proxytest.Options{
		DefaultEgress: true,
		Configure: func(c *forwardproxy.Config) {
			c.ExitRanges = prefixes("fd00:5e55:1::/64")
			c.AllowCIDRs = prefixes("fd00::/8")
			c.DialContext = seam.dial
		},
	})
	status, rule, _ := request(t, p.Addr, "CONNECT", "[fd00:5e55:1::22]:22")
	if status != http.StatusForbidden || rule != forwardproxy.RuleExitRange {
		t.Errorf("CONNECT into the own exit range: %d rule %q; want 403 rule %s", status, rule, forwardproxy.RuleExitRange)
	}
	if _, targets := seam.take(); len(targets) > 0 {
		t.Errorf("dialled %v; want nothing", targets)
	}
	request(t, p.Addr, "CONNECT", "[fd00:5e55:2::22]:22")
	if _, targets := seam.take(); len(targets) != 1 {
		t.Errorf("dialled %v for an allowed address beside the range; want it dialled once", targets)
	}
	if m := grepLines(scrape(t, p.Addr), `rule="exit-range"`); !strings.Contains(m, "} 1") {
		t.Errorf("metrics for rule exit-range: %q; want 1", m)
	}
}

func TestExitRangeConfigErrors(t *testing.T) {
	tests := map[string]struct {
		cfg  forwardproxy.Config
		want string
	}{
		"loopback range": {forwardproxy.Config{ExitRanges: prefixes("::1/128")}, "exit range ::1/128: loopback"},
		"unmasked range": {forwardproxy.Config{ExitRanges: []netip.Prefix{netip.MustParsePrefix("fd00::1/64")}}, "want a masked"},
		"with source":    {forwardproxy.Config{ExitRanges: prefixes("fd00::/64"), SourceAddr: netip.MustParseAddr("192.0.2.1")}, "not both"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := forwardproxy.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzExitRange: SplitSession loses nothing (user and session put back
// together give the username) and a session's address is always inside
// the range, the same on every call.
func FuzzExitRange(f *testing.F) {
	for _, seed := range []string{"crawler", "crawler+session-abc", "session-x", "a+session-", "a+session-b+session-c", "session-\x00"} {
		f.Add(seed, uint8(64))
	}
	f.Fuzz(func(t *testing.T, username string, bits uint8) {
		user, session, err := forwardproxy.SplitSession(username)
		if err != nil {
			return
		}
		switch {
		case session == "" && user != username:
			t.Fatalf("SplitSession(%q) = %q, no session: lost part of it", username, user)
		case session != "" && username != user+"+session-"+session && (user != "" || username != "session-"+session):
			t.Fatalf("SplitSession(%q) = %q, %q: does not put back together", username, user, session)
		}
		r := netip.PrefixFrom(netip.MustParseAddr("2a01:4f8:c17:1a2b::"), int(bits%129)).Masked()
		a, ok := forwardproxy.ExitAddr([]netip.Prefix{r}, netip.MustParseAddr("2606:4700::1111"), forwardproxy.SessionSeed(session))
		b, _ := forwardproxy.ExitAddr([]netip.Prefix{r}, netip.MustParseAddr("2606:4700::1111"), forwardproxy.SessionSeed(session))
		if !ok || !r.Contains(a) || a != b {
			t.Fatalf("session %q in %s: %s, %s (ok %v); want one address of the range", session, r, a, b, ok)
		}
		if r.Bits() <= 126 && a == r.Addr() {
			t.Fatalf("session %q in %s: the reserved first address", session, r)
		}
	})
}
