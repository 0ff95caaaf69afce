package forwardproxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/netnstest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// The netns test's addresses: a ULA /64 routed to the proxy's namespace as
// its exit range, and a link between the proxy's and the target's.
var (
	netnsExitRange = netip.MustParsePrefix("fd00:5e55:1::/64")
	netnsLink      = "fd00:5e55:ffff::/64"
	netnsProxyIP   = "fd00:5e55:ffff::1"
	netnsTargetIP  = "fd00:5e55:ffff::2"

	// An IPv4 range beside it (six usable addresses), over an IPv4 link.
	netnsExitRange4 = netip.MustParsePrefix("198.18.5.0/29")
	netnsLink4      = "10.99.0.0/24"
	netnsProxyIP4   = "10.99.0.1"
	netnsTargetIP4  = "10.99.0.2"
)

// sourceRecorder is the target: it answers every request with the source
// address it sees and records it.
type sourceRecorder struct {
	mu   sync.Mutex
	seen []netip.Addr
}

func (s *sourceRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ap := netip.MustParseAddrPort(r.RemoteAddr)
	s.mu.Lock()
	s.seen = append(s.seen, ap.Addr())
	s.mu.Unlock()
	_, _ = io.WriteString(w, ap.Addr().String())
}

func (s *sourceRecorder) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// netnsRig is a ranged forward-proxy binary in one namespace and a target
// in another; the exit range is routed from the target's to the proxy's.
type netnsRig struct {
	proxyNS, targetNS *netnstest.Namespace
	proxy             *proxytest.Proxy
	target            string // host:port, IPv6
	target4           string // host:port, IPv4
	seen              *sourceRecorder
}

func startNetnsRig(t *testing.T) *netnsRig {
	netnstest.Needs(t)
	rig := &netnsRig{
		proxyNS:  netnstest.New(t, "exitproxy"),
		targetNS: netnstest.New(t, "exittarget"),
		seen:     &sourceRecorder{},
	}
	netnstest.Veth(t, rig.proxyNS, "px0", rig.targetNS, "tg0")
	rig.proxyNS.IP(t, "-6", "addr", "add", netnsProxyIP+"/64", "dev", "px0", "nodad")
	rig.targetNS.IP(t, "-6", "addr", "add", netnsTargetIP+"/64", "dev", "tg0", "nodad")
	// What a cloud does for a routed prefix, and what the host must do
	// (docs/ipv6.md): route it to the host, and take it as local there.
	rig.targetNS.IP(t, "-6", "route", "add", netnsExitRange.String(), "via", netnsProxyIP)
	rig.proxyNS.IP(t, "-6", "route", "add", "local", netnsExitRange.String(), "dev", "lo")

	rig.proxyNS.IP(t, "addr", "add", netnsProxyIP4+"/24", "dev", "px0")
	rig.targetNS.IP(t, "addr", "add", netnsTargetIP4+"/24", "dev", "tg0")
	rig.targetNS.IP(t, "route", "add", netnsExitRange4.String(), "via", netnsProxyIP4)
	rig.proxyNS.IP(t, "route", "add", "local", netnsExitRange4.String(), "dev", "lo")

	rig.target = rig.serveTarget(t, "["+netnsTargetIP+"]:0")
	rig.target4 = rig.serveTarget(t, netnsTargetIP4+":0")

	rig.proxy = proxytest.StartBinary(t, proxytest.Options{
		Username: "crawler", Password: "pw", DefaultEgress: true, Netns: rig.proxyNS.Name, Verbosity: 2,
		Args: []string{"--exit-range=" + netnsExitRange.String(), "--exit-range=" + netnsExitRange4.String(),
			"--allow-cidr=" + netnsLink, "--allow-cidr=" + netnsLink4, "--dial-timeout=3s"},
	})
	return rig
}

// serveTarget serves the recorder on addr in the target's namespace and
// returns its host:port.
func (rig *netnsRig) serveTarget(t *testing.T, addr string) string {
	var ln net.Listener
	if err := rig.targetNS.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, rig.targetNS.Name, err)
	}
	srv := &http.Server{Handler: rig.seen, ReadHeaderTimeout: ioTimeout}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// fetch asks target (host:port), through the proxy, for the source
// address it sees, by CONNECT or by plain HTTP, as user; it returns the
// status line's code and the body.
func (rig *netnsRig) fetch(t *testing.T, method, target, user string) (int, string) {
	t.Helper()
	var c net.Conn
	if err := rig.proxyNS.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", rig.proxy.Addr, ioTimeout)
		return err
	}); err != nil {
		t.Fatalf("dialling the proxy in %s: %v", rig.proxyNS.Name, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	br := bufio.NewReader(c)
	auth := "Proxy-Authorization: " + basic(user, "pw") + "\r\n"
	get := "GET / HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"
	if method == http.MethodConnect {
		_, _ = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+auth+"\r\n")
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
	} else {
		get = "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n" + auth + "Connection: close\r\n\r\n"
	}
	_, _ = io.WriteString(c, get)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("%s: reading the target's answer: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// source fetches and parses the address the target saw; it fails t unless
// the fetch succeeded from an address of the exit range.
func (rig *netnsRig) source(t *testing.T, method, user string) netip.Addr {
	t.Helper()
	return rig.sourceIn(t, method, rig.target, user, netnsExitRange)
}

// sourceIn is source for another target and range.
func (rig *netnsRig) sourceIn(t *testing.T, method, target, user string, want netip.Prefix) netip.Addr {
	t.Helper()
	code, body := rig.fetch(t, method, target, user)
	a, err := netip.ParseAddr(body)
	if code != http.StatusOK || err != nil || !want.Contains(a) {
		t.Fatalf("%s %s as %s: %d %q; want 200 and an address of %s", method, target, user, code, body, want)
	}
	return a
}

// TestExitRangeInNetns runs the forward-proxy binary in a network
// namespace with --exit-range on a ULA /64 routed to it, and a target in
// another namespace that records the source addresses it sees: 64
// sessions leave from 64 addresses of the prefix, a session twice from the
// same one, connections without a session from a new one each; internal
// IPv6 destinations are still refused; and without the local route the
// replies do not arrive (the dial times out), which is why the host needs
// it and why forward-proxy refuses to start without it.
func TestExitRangeInNetns(t *testing.T) {
	rig := startNetnsRig(t)
	for _, method := range []string{http.MethodConnect, http.MethodGet} {
		t.Run(method+"/sessions", func(t *testing.T) {
			distinct := map[netip.Addr]string{}
			for i := range 64 {
				user := "crawler+session-" + method + "-" + strconv.Itoa(i)
				first := rig.source(t, method, user)
				if again := rig.source(t, method, user); again != first {
					t.Errorf("session %q left from %s, then from %s; want the same address", user, first, again)
				}
				if prev, dup := distinct[first]; dup {
					t.Errorf("sessions %q and %q both left from %s", prev, user, first)
				}
				distinct[first] = user
			}
			if len(distinct) != 64 {
				t.Errorf("the target saw %d distinct addresses for 64 sessions; want 64", len(distinct))
			}
		})
		t.Run(method+"/no session", func(t *testing.T) {
			a, b := rig.source(t, method, "crawler"), rig.source(t, method, "crawler")
			if a == b {
				t.Errorf("two connections without a session both left from %s; want a fresh address each", a)
			}
		})
		t.Run(method+"/egress guard", func(t *testing.T) {
			before := rig.seen.count()
			for _, target := range []string{"[::1]:80", "[fd00:5e55:eeee::1]:80", "[fe80::1]:80", "[" + netnsExitRange.Addr().Next().String() + "]:80"} {
				code, body := rig.fetch(t, method, target, "crawler+session-guard")
				if code != http.StatusForbidden || !strings.Contains(body, "refused by rule") {
					t.Errorf("%s %s: %d %q; want 403 refused by rule", method, target, code, body)
				}
			}
			if n := rig.seen.count(); n != before {
				t.Errorf("the target saw %d more connections during refusals; want none", n-before)
			}
		})
	}
	t.Run("IPv4 range", func(t *testing.T) {
		// Six addresses for twelve sessions: stable, inside the usable
		// part of the range, shared (docs/ipv6.md says so).
		distinct := map[netip.Addr]bool{}
		for i := range 12 {
			user := "crawler+session-v4-" + strconv.Itoa(i)
			first := rig.sourceIn(t, http.MethodConnect, rig.target4, user, netnsExitRange4)
			if again := rig.sourceIn(t, http.MethodGet, rig.target4, user, netnsExitRange4); again != first {
				t.Errorf("session %q left from %s, then from %s; want the same address", user, first, again)
			}
			if first == netnsExitRange4.Addr() || first == netip.MustParseAddr("198.18.5.7") {
				t.Errorf("session %q left from %s, the network or broadcast address", user, first)
			}
			distinct[first] = true
		}
		if len(distinct) < 2 {
			t.Errorf("12 sessions left from %d address(es) of %s; want them spread", len(distinct), netnsExitRange4)
		}
	})
	t.Run("without the local route replies are lost", func(t *testing.T) {
		rig.proxyNS.IP(t, "-6", "route", "del", "local", netnsExitRange.String(), "dev", "lo")
		code, body := rig.fetch(t, http.MethodConnect, rig.target, "crawler+session-noroute")
		if code != http.StatusGatewayTimeout {
			t.Errorf("CONNECT without the local route: %d %q; want 504 (the SYN leaves, the SYN-ACK is dropped)", code, body)
		}
		// So a proxy started now refuses to, naming the route.
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", rig.proxyNS.Name, proxytest.ForwardProxyBinary(t),
			"--listen=127.0.0.1:0", "--exit-range="+netnsExitRange.String()).CombinedOutput()
		want := "run `ip -6 route add local " + netnsExitRange.String() + " dev lo`"
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("forward-proxy started without the local route: %v, output:\n%s\nwant it to exit naming %q", err, out, want)
		}
	})
}
