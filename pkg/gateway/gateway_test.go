package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/hostrule/site"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/leaseapitest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// unit is a gateway calling a real lease API over HTTP (Remote), as a
// gateway-tier replica does, on a store with no auth and a fake clock, with
// in-process forward proxies as upstreams.
type unit struct {
	clock    *clocktesting.FakeClock
	api      *leaseapitest.API
	gw       *gateway.Gateway
	addr     string
	leaseAPI string
	ups      map[string]*proxytest.Proxy
}

// unitOptions change what startUnitWith starts.
type unitOptions struct {
	// leaveFrom gives upstream i the exit address leaveFrom[i], when set.
	leaveFrom []string
	// countries gives upstream i the exit country countries[i], when set.
	countries []string
	// resolver resolves target names for every upstream; nil: DNS.
	resolver forwardproxy.Resolver
	// siteBanProxies is the lease store's bound on the proxies one site
	// may ban; 0: the store's default.
	siteBanProxies int
	// gateway adjusts the gateway's Config.
	gateway func(*gateway.Config)
	// maxLeases is each upstream's slots; 0: one.
	maxLeases int32
	// quiet discards the gateway's logs (benchmarks: the test logger
	// would print every request).
	quiet bool
}

func startUnit(t *testing.T, upstreams ...string) *unit {
	t.Helper()
	return startUnitWith(t, unitOptions{}, upstreams...)
}

func startUnitWith(t testing.TB, opts unitOptions, upstreams ...string) *unit {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	if opts.quiet {
		ctx = klog.NewContext(context.Background(), logr.Discard())
	}
	ctx, cancel := context.WithCancel(ctx)
	u := &unit{clock: clocktesting.NewFakeClock(t0), ups: map[string]*proxytest.Proxy{}}
	u.api = leaseapitest.Start(t, leaseapitest.Config{
		Key: []byte("gateway-unit-test-key-of-32-byte"), Clock: u.clock, DefaultTTL: 30 * time.Second,
		Site: site.Of, SiteBanProxies: opts.siteBanProxies,
	})
	for i, name := range upstreams {
		var popts proxytest.Options
		if i < len(opts.leaveFrom) {
			popts.Configure = proxytest.LeaveFrom(opts.leaveFrom[i])
		}
		if r := opts.resolver; r != nil {
			leave := popts.Configure
			popts.Configure = func(c *forwardproxy.Config) {
				if leave != nil {
					leave(c)
				}
				c.Resolver = r
			}
		}
		p := proxytest.StartInProcess(t, popts)
		u.ups[name] = p
		var country string
		if i < len(opts.countries) {
			country = opts.countries[i]
		}
		u.api.Upsert(leaseapitest.Proxy{
			Namespace: "crawl", Name: name, ExitCountry: country,
			URL: "http://" + p.Addr, Labels: map[string]string{gateway.PoolLabel: "p"}, Pool: "p", MaxLeases: opts.maxLeases,
			LatencyMillis: int64(i), ReadySince: t0,
		})
	}
	if err := u.api.Server.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	u.leaseAPI = u.api.URL
	remote, err := gateway.NewRemote(gateway.RemoteConfig{URLs: []string{u.api.URL}})
	if err != nil {
		t.Fatal(err)
	}
	auth := auth.None{}
	cfg := gateway.Config{
		Leases: remote, Authenticator: auth, Authorizer: auth, AuthNone: true,
		SessionIdle: time.Minute, Clock: u.clock, JanitorInterval: time.Hour, // Tidy is driven by the test
	}
	if opts.gateway != nil {
		opts.gateway(&cfg)
	}
	u.gw, err = gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- u.gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return u
}

func (u *unit) get(t *testing.T, username, target string) (int, string) {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: u.addr, User: url.UserPassword(username, "ignored")}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 20 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s through the gateway: %v", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// anonymous owns every lease under NoAuth.
var anonymous = auth.User{Name: "system:anonymous"}.Identity()

// sessionProxy is the proxy the session's lease holds, "" if none.
func (u *unit) sessionProxy(t *testing.T, scope, session string) string {
	t.Helper()
	ls := u.api.SessionProxies(anonymous, scope, session)
	switch len(ls) {
	case 0:
		return ""
	case 1:
		return ls[0]
	}
	t.Fatalf("session %s holds %d leases", session, len(ls))
	return ""
}

func TestSessionRenewsWhileUsedAndLapsesWhenIdle(t *testing.T) {
	u := startUnit(t, "a", "b")
	target := proxytest.StartHTTPTarget(t)
	if status, body := u.get(t, "ns-crawl+session-s", target.URL+"/echo"); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	held := u.api.SessionProxies(anonymous, "crawl", "s")
	if len(held) != 1 {
		t.Fatalf("session holds %d leases", len(held))
	}
	// The session was last used when its connection left it, which may
	// come after the answer was read: wait for that before moving the clock.
	eventually.Check(t, 10*time.Second, 10*time.Millisecond, "the connection leaving its session", func(context.Context) error {
		if n := u.gw.OpenSessionConnections(); n != 0 {
			return fmt.Errorf("%d connections open", n)
		}
		return nil
	})
	// Past half the TTL, the janitor renews: the lease lives on past its first expiry.
	u.clock.Step(20 * time.Second)
	u.gw.Tidy(t.Context())
	u.clock.Step(20 * time.Second)
	u.gw.Tidy(t.Context())
	if got := u.sessionProxy(t, "crawl", "s"); got != held[0] {
		t.Fatalf("after 40s (TTL 30s) the session holds %q, want %q renewed", got, held[0])
	}
	// A minute without connections ends the session; its lease, which
	// other replicas might share, is no longer renewed and lapses at its
	// expiry (within one TTL).
	u.clock.Step(30 * time.Second)
	u.gw.Tidy(t.Context())
	if u.gw.Sessions() != 0 {
		t.Errorf("idle session still remembered (%d sessions)", u.gw.Sessions())
	}
	u.clock.Step(30 * time.Second)
	u.gw.Tidy(t.Context())
	if got := u.sessionProxy(t, "crawl", "s"); got != "" {
		t.Errorf("a TTL after the session went idle its lease still holds %q", got)
	}
}

func TestSessionCallMovesTheSession(t *testing.T) {
	u := startUnit(t, "a", "b")
	target := proxytest.StartHTTPTarget(t)
	if status, _ := u.get(t, "ns-crawl+session-s", target.URL+"/echo"); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	first := u.sessionProxy(t, "crawl", "s")
	c, err := client.New(u.leaseAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseSession(t.Context(), "crawl", "s", client.OutcomeBanned, "127.0.0.1"); err != nil {
		t.Fatalf("ReleaseSession: %v", err)
	}
	if got := u.sessionProxy(t, "crawl", "s"); got != "" {
		t.Fatalf("after the session call the session still holds %s", got)
	}
	if status, _ := u.get(t, "ns-crawl+session-s", target.URL+"/echo"); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if second := u.sessionProxy(t, "crawl", "s"); second == first || second == "" {
		t.Errorf("after a ban on %s the session went through %q", first, second)
	}
	// first cools down for 127.0.0.1: a rotating connection there gets b, not a.
	if status, _ := u.get(t, "ns-crawl", target.URL+"/echo"); status != http.StatusServiceUnavailable {
		t.Errorf("rotating connection with a held and a cooling proxy: %d, want 503", status)
	}
}

func TestSessionCallErrors(t *testing.T) {
	u := startUnit(t, "a")
	for name, tc := range map[string]struct {
		query, wantField string
	}{
		"bad outcome":   {query: "?outcome=maybe", wantField: "outcome"},
		"bad namespace": {query: "?namespace=Bad_NS", wantField: "namespace"},
		"unknown param": {query: "?colour=blue", wantField: "colour"},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodDelete, u.leaseAPI+"/v1/sessions/s"+tc.query, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"`+tc.wantField+`"`) {
				t.Errorf("%d %s; want 400 naming %s", resp.StatusCode, body, tc.wantField)
			}
		})
	}
}
