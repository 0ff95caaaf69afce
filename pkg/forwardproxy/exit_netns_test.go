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
	target            string // host:port
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

	var ln net.Listener
	if err := rig.targetNS.Do(func() (err error) {
		ln, err = net.Listen("tcp", "["+netnsTargetIP+"]:0")
		return err
	}); err != nil {
		t.Fatalf("listening in %s: %v", rig.targetNS.Name, err)
	}
	srv := &http.Server{Handler: rig.seen, ReadHeaderTimeout: ioTimeout}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	rig.target = ln.Addr().String()

	rig.proxy = proxytest.StartBinary(t, proxytest.Options{
		Username: "crawler", Password: "pw", DefaultEgress: true, Netns: rig.proxyNS.Name, Verbosity: 2,
		Args: []string{"--exit-range=" + netnsExitRange.String(), "--allow-cidr=" + netnsLink, "--dial-timeout=1s"},
	})
	return rig
}

// fetch asks the target, through the proxy, for the source address it
// sees, by CONNECT or by plain HTTP, as user; it returns the status line's
// code and the body.
func (rig *netnsRig) fetch(t *testing.T, method, user string) (int, string) {
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
	get := "GET / HTTP/1.1\r\nHost: " + rig.target + "\r\nConnection: close\r\n\r\n"
	if method == http.MethodConnect {
		_, _ = io.WriteString(c, "CONNECT "+rig.target+" HTTP/1.1\r\nHost: "+rig.target+"\r\n"+auth+"\r\n")
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
	} else {
		get = "GET http://" + rig.target + "/ HTTP/1.1\r\nHost: " + rig.target + "\r\n" + auth + "Connection: close\r\n\r\n"
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
	code, body := rig.fetch(t, method, user)
	a, err := netip.ParseAddr(body)
	if code != http.StatusOK || err != nil || !netnsExitRange.Contains(a) {
		t.Fatalf("%s as %s: %d %q; want 200 and an address of %s", method, user, code, body, netnsExitRange)
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
				code, body := fetchAuthority(t, rig, method, target)
				if code != http.StatusForbidden || !strings.Contains(body, "refused by rule") {
					t.Errorf("%s %s: %d %q; want 403 refused by rule", method, target, code, body)
				}
			}
			if n := rig.seen.count(); n != before {
				t.Errorf("the target saw %d more connections during refusals; want none", n-before)
			}
		})
	}
	t.Run("without the local route replies are lost", func(t *testing.T) {
		rig.proxyNS.IP(t, "-6", "route", "del", "local", netnsExitRange.String(), "dev", "lo")
		code, body := rig.fetch(t, http.MethodConnect, "crawler+session-noroute")
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

// fetchAuthority sends one request for authority through the rig's proxy
// and returns the proxy's answer.
func fetchAuthority(t *testing.T, rig *netnsRig, method, authority string) (int, string) {
	t.Helper()
	saved := rig.target
	rig.target = authority
	defer func() { rig.target = saved }()
	return rig.fetch(t, method, "crawler+session-guard")
}
