package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// The lease API under abuse (issue 20): each point of the issue against
// the real server, served by Serve on a loopback listener and called over
// TCP, so that net/http's own behaviour (timeouts, header limits, 100
// Continue, redirects) is part of what is tested.

// liveServer is a leading Server on a fake clock, serving on 127.0.0.1.
type liveServer struct {
	t       *testing.T
	srv     *Server
	store   *store.Store
	clk     *clocktesting.FakeClock
	metrics *storetest.Metrics
	url     string
	addr    string
}

// serveLive starts a server with proxies p1 and p2 (domain-free) and the
// fakeAuth tokens; storeCfg adjusts the store, srvCfg the server.
func serveLive(t *testing.T, storeCfg func(*store.Config), srvCfg func(*Server)) *liveServer {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := storetest.NewMetrics()
	cfg := store.Config{Clock: clk, Key: testKey, Metrics: m}
	if storeCfg != nil {
		storeCfg(&cfg)
	}
	st, err := store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(newProxy("p1", withLatency(10)))
	st.Upsert(newProxy("p2", withLatency(20)))
	auth := &fakeAuth{}
	srv, err := New(Config{Store: st, Authenticator: auth, Authorizer: auth, Horizon: (&memHorizon{}).replica()})
	if err != nil {
		t.Fatal(err)
	}
	if srvCfg != nil {
		srvCfg(srv)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &liveServer{t: t, srv: srv, store: st, clk: clk, metrics: m, url: "http://" + ln.Addr().String(), addr: ln.Addr().String()}
}

// call makes one request with token (goodToken if none) and returns the
// status, the decoded error (if any) and the raw body.
func (ls *liveServer) call(method, pathAndQuery, body string, token ...string) (int, wire.ErrorBody, []byte) {
	ls.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ls.url+pathAndQuery, r)
	if err != nil {
		ls.t.Fatal(err)
	}
	tok := goodToken
	if len(token) > 0 {
		tok = token[0]
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ls.t.Fatalf("%s %s: %v", method, pathAndQuery, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e wire.Error
	if resp.StatusCode >= 300 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			ls.t.Errorf("%s %s: %d with Content-Type %q, want JSON: %s", method, pathAndQuery, resp.StatusCode, ct, raw)
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" {
			ls.t.Errorf("%s %s: %d is not a JSON error: %q", method, pathAndQuery, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, e.Error, raw
}

func (ls *liveServer) acquire(body string, token ...string) wire.Lease {
	ls.t.Helper()
	code, e, raw := ls.call(http.MethodPost, "/v1/leases", body, token...)
	if code != http.StatusCreated {
		ls.t.Fatalf("acquire %s: %d %+v", body, code, e)
	}
	var l wire.Lease
	if err := json.Unmarshal(raw, &l); err != nil {
		ls.t.Fatal(err)
	}
	return l
}

// rawExchange writes head (and body) on a fresh connection and returns
// everything the server answers until it closes or a second passes after
// the first bytes.
func (ls *liveServer) rawExchange(request string) string {
	ls.t.Helper()
	conn, err := net.Dial("tcp", ls.addr)
	if err != nil {
		ls.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		ls.t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		ls.t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
}

// Point 1: one grant counts at most one outcome.
func TestAbuseRevokedLeaseCountsOneBan(t *testing.T) {
	ls := serveLive(t, nil, nil)
	l := ls.acquire(`{"holder":"w","domain":"example.com","namespace":"crawl"}`)
	// The instance is replaced (as an edited cloudInit does): the lease is revoked.
	ls.store.Upsert(newProxy(l.Proxy.Name, withLatency(10), withURL("http://127.0.0.1:3999/replaced")))
	var codes []int
	for range 7 {
		code, _, _ := ls.call(http.MethodDelete, "/v1/leases/"+l.ID+"?outcome=banned", "")
		codes = append(codes, code)
	}
	want := []int{204, 404, 404, 404, 404, 404, 404}
	if diff := cmp.Diff(want, codes); diff != "" {
		t.Errorf("seven banned releases of one revoked lease (-want +got):\n%s", diff)
	}
	// One ban: the first cool-down (60s), not the cap. Without p2, only
	// the banned proxy could serve the domain.
	ls.store.Remove(newProxy("p2").Key)
	code, e, _ := ls.call(http.MethodPost, "/v1/leases", `{"holder":"w3","domain":"example.com"}`)
	if code != http.StatusServiceUnavailable || e.Code != wire.CodeCoolingDown {
		t.Fatalf("acquire for the banned domain: %d %+v, want 503 CoolingDown", code, e)
	}
	if got := ls.metrics.Snapshot().Ends[store.EndReleasedBanned]; got != 0 {
		t.Errorf("%d banned lease ends counted; the lease ended as revoked", got)
	}
	req, _ := http.NewRequest(http.MethodPost, ls.url+"/v1/leases", strings.NewReader(`{"holder":"w3","domain":"example.com"}`))
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q after one ban, want 60", got)
	}
	// A live lease too: a second release is a 404 and counts nothing.
	ls.store.Upsert(newProxy(l.Proxy.Name, withLatency(10), withURL("http://127.0.0.1:3999/replaced")))
	live := ls.acquire(`{"holder":"w4","domain":"other.example"}`)
	for i, want := range []int{204, 404} {
		if code, _, _ := ls.call(http.MethodDelete, "/v1/leases/"+live.ID+"?outcome=banned", ""); code != want {
			t.Errorf("release %d of a live lease: %d, want %d", i+1, code, want)
		}
	}
}

// Point 3: a query that does not parse is a 400 naming the parameter, and
// nothing is lost.
func TestAbuseQueriesThatDoNotParse(t *testing.T) {
	ls := serveLive(t, nil, nil)
	l := ls.acquire(`{"holder":"w","domain":"example.com"}`)
	for name, tc := range map[string]struct {
		method, path string
		wantField    string
	}{
		"a semicolon in a release":           {http.MethodDelete, "/v1/leases/" + l.ID + "?outcome=banned;domain=example.com", "outcome"},
		"a bad escape in discovery":          {http.MethodGet, "/v1/proxies?namespace=%zz", "namespace"},
		"a bad escape in a value of release": {http.MethodDelete, "/v1/leases/" + l.ID + "?outcome=banned&domain=ex%ample.com", "domain"},
		"a bad escape in a name":             {http.MethodGet, "/v1/leases?hol%zzder=w", "hol%zzder"},
		"a parameter without a value":        {http.MethodGet, "/v1/leases?holder", "holder"},
		"an empty pair":                      {http.MethodGet, "/v1/leases?holder=w&&namespace=crawl", ""},
		"a semicolon in a list":              {http.MethodGet, "/v1/leases?namespace=crawl;holder=w", "namespace"},
	} {
		t.Run(name, func(t *testing.T) {
			code, e, _ := ls.call(tc.method, tc.path, "")
			if code != http.StatusBadRequest || e.Code != wire.CodeInvalid || e.Field != tc.wantField {
				t.Errorf("%d %+v, want 400 Invalid on %q", code, e, tc.wantField)
			}
		})
	}
	// The refused release lost nothing: the lease is live, and no ban counted.
	if code, e, _ := ls.call(http.MethodGet, "/v1/leases/"+l.ID, ""); code != http.StatusOK {
		t.Errorf("the lease after refused releases: %d %+v", code, e)
	}
	if got := ls.metrics.Snapshot().Cooldowns; got != 0 {
		t.Errorf("%d cool-downs after refused releases, want 0", got)
	}
}

// Point 4: strict means strict. Every refused form names what it refuses.
func TestAbuseStrictDecoding(t *testing.T) {
	ls := serveLive(t, nil, nil)
	l := ls.acquire(`{"holder":"w"}`)
	for name, tc := range map[string]struct {
		method, path, body string
		wantField          string
	}{
		"a case-variant key":            {"POST", "/v1/leases", `{"HOLDER":"w"}`, "HOLDER"},
		"a case-variant ttl":            {"POST", "/v1/leases", `{"holder":"w","TTL":"30s"}`, "TTL"},
		"a duplicate key":               {"POST", "/v1/leases", `{"holder":"w","holder":"x"}`, "holder"},
		"a duplicate, first invalid":    {"POST", "/v1/leases", `{"holder":"w","ttl":"1h","ttl":"30s"}`, "ttl"},
		"a null body":                   {"POST", "/v1/leases", `null`, ""},
		"a null member":                 {"POST", "/v1/leases", `{"holder":null}`, "holder"},
		"ttl 0s":                        {"POST", "/v1/leases", `{"holder":"w","ttl":"0s"}`, "ttl"},
		"an empty ttl":                  {"POST", "/v1/leases", `{"holder":"w","ttl":""}`, "ttl"},
		"a query on acquire":            {"POST", "/v1/leases?wait=10s", `{"holder":"w"}`, "wait"},
		"a null renew body":             {"POST", "/v1/leases/" + l.ID + "/renew", `null`, ""},
		"renew ttl 0s":                  {"POST", "/v1/leases/" + l.ID + "/renew", `{"ttl":"0s"}`, "ttl"},
		"a case-variant key in renew":   {"POST", "/v1/leases/" + l.ID + "/renew", `{"Ttl":"30s"}`, "Ttl"},
		"a query on renew":              {"POST", "/v1/leases/" + l.ID + "/renew?ttl=30s", ``, "ttl"},
		"a query on get":                {"GET", "/v1/leases/" + l.ID + "?verbose=1", ``, "verbose"},
		"a body on release":             {"DELETE", "/v1/leases/" + l.ID, `{"outcome":"banned"}`, ""},
		"a body on get":                 {"GET", "/v1/leases/" + l.ID, `{}`, ""},
		"a body on list":                {"GET", "/v1/leases", `x`, ""},
		"a number where a string is":    {"POST", "/v1/leases", `{"holder":7}`, "holder"},
		"an object where a string is":   {"POST", "/v1/leases", `{"holder":"w","selector":{}}`, "selector"},
		"an unknown key, similar to no": {"POST", "/v1/leases", `{"holder":"w","namespaces":"crawl"}`, "namespaces"},
	} {
		t.Run(name, func(t *testing.T) {
			code, e, _ := ls.call(tc.method, tc.path, tc.body)
			if code != http.StatusBadRequest || e.Code != wire.CodeInvalid || e.Field != tc.wantField {
				t.Fatalf("%d %+v, want 400 Invalid on %q", code, e, tc.wantField)
			}
			if tc.wantField != "" && !strings.Contains(e.Message, tc.wantField) {
				t.Errorf("message %q does not name %s", e.Message, tc.wantField)
			}
		})
	}
	// Refused releases and renewals lost nothing.
	if code, e, _ := ls.call(http.MethodPost, "/v1/leases/"+l.ID+"/renew", `{}`); code != http.StatusOK {
		t.Errorf("renew after the refusals: %d %+v", code, e)
	}
}

// Point 5: one id, one spelling.
func TestAbuseLeaseIDsAreCanonical(t *testing.T) {
	ls := serveLive(t, nil, nil)
	l := ls.acquire(`{"holder":"w","domain":"example.com"}`)
	raw, err := base64.RawURLEncoding.DecodeString(l.ID)
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var variants []string
	for _, c := range alphabet {
		v := l.ID[:len(l.ID)-1] + string(c)
		if again, err := base64.RawURLEncoding.DecodeString(v); v != l.ID && err == nil && string(again) == string(raw) {
			variants = append(variants, v) // the same bytes, spelt otherwise
		}
	}
	// Newlines are skipped by Go's base64 decoder, strict or not.
	variants = append(variants, l.ID[:10]+"%0A"+l.ID[10:], l.ID+"%0D%0A")
	if len(variants) < 3 {
		t.Fatalf("only %d other spellings; the test needs an id whose length leaves padding bits", len(variants))
	}
	for _, v := range variants {
		for _, call := range []struct{ method, path string }{
			{http.MethodGet, "/v1/leases/" + v},
			{http.MethodPost, "/v1/leases/" + v + "/renew"},
			{http.MethodDelete, "/v1/leases/" + v + "?outcome=banned"},
		} {
			if code, e, _ := ls.call(call.method, call.path, ""); code != http.StatusNotFound || e.Code != wire.CodeNotFound {
				t.Errorf("%s with the spelling %q: %d %+v, want 404", call.method, v, code, e)
			}
		}
	}
	if code, e, _ := ls.call(http.MethodGet, "/v1/leases/"+l.ID, ""); code != http.StatusOK {
		t.Errorf("the id as issued: %d %+v", code, e)
	}
}

// Point 7: every error is the JSON error shape and names no socket.
func TestAbuseErrorShapes(t *testing.T) {
	ls := serveLive(t, nil, func(s *Server) { s.readTimeout = 300 * time.Millisecond })
	host := "Host: " + ls.addr + "\r\nAuthorization: Bearer " + goodToken + "\r\n"

	t.Run("a body that times out", func(t *testing.T) {
		got := ls.rawExchange("POST /v1/leases HTTP/1.1\r\n" + host + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"holder\":")
		if !strings.HasPrefix(got, "408 application/json\n") || !strings.Contains(got, `"code":"RequestTimeout"`) {
			t.Errorf("answer %q, want 408 RequestTimeout in JSON", got)
		}
		if strings.Contains(got, "127.0.0.1") || strings.Contains(got, "tcp") {
			t.Errorf("answer %q names a socket", got)
		}
	})
	t.Run("headers over the limit", func(t *testing.T) {
		got := ls.rawExchange("GET /v1/leases HTTP/1.1\r\n" + host + "X-Padding: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n")
		if !strings.HasPrefix(got, "431 application/json\n") || !strings.Contains(got, `"code":"HeadersTooLarge"`) {
			t.Errorf("answer %q, want 431 HeadersTooLarge in JSON", got)
		}
	})
	t.Run("a path the mux would redirect", func(t *testing.T) {
		for _, path := range []string{"/v1//leases", "/v1/leases/../proxies", "/v1/./proxies"} {
			got := ls.rawExchange("GET " + path + " HTTP/1.1\r\n" + host + "\r\n")
			if !strings.HasPrefix(got, "404 application/json\n") || !strings.Contains(got, `"code":"NotFound"`) {
				t.Errorf("GET %s: answer %q, want 404 NotFound in JSON", path, got)
			}
		}
	})
	t.Run("Expect: 100-continue with a body over the limit", func(t *testing.T) {
		got := ls.rawExchange("POST /v1/leases HTTP/1.1\r\n" + host + "Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 10485760\r\n\r\n")
		if !strings.HasPrefix(got, "413 application/json\n") || !strings.Contains(got, `"code":"RequestTooLarge"`) {
			t.Errorf("answer %q, want 413 RequestTooLarge before any 100 Continue", got)
		}
	})
	t.Run("Expect: 100-continue with a body on release", func(t *testing.T) {
		got := ls.rawExchange("DELETE /v1/leases/x HTTP/1.1\r\n" + host + "Expect: 100-continue\r\nContent-Length: 10\r\n\r\n")
		if !strings.HasPrefix(got, "400 application/json\n") {
			t.Errorf("answer %q, want 400 before any 100 Continue", got)
		}
	})
}

// Point 8: sessions and cool-downs are bounded, with an eviction rule and
// a metric, for callers of the API too (the store's own structures:
// store.TestSessionsAndCooldownsAreBounded).
func TestAbuseStateIsBounded(t *testing.T) {
	const limit, cycles = 50, 1000
	ls := serveLive(t, func(c *store.Config) { c.MaxSessions, c.MaxCooldowns = limit, limit }, nil)
	for i := range cycles {
		l := ls.acquire(fmt.Sprintf(`{"holder":"w","session":"s%d","domain":"d%d.example","namespace":"crawl"}`, i, i))
		if code, e, _ := ls.call(http.MethodDelete, "/v1/leases/"+l.ID+"?outcome=banned", ""); code != http.StatusNoContent {
			t.Fatalf("release %d: %d %+v", i, code, e)
		}
	}
	snap := ls.metrics.Snapshot()
	want := map[string]int{store.StateSessions: cycles - limit, store.StateCooldowns: cycles - limit}
	if diff := cmp.Diff(want, snap.Evictions); diff != "" {
		t.Errorf("evictions (-want +got):\n%s", diff)
	}
	// Each ban was another site: 1,000 remembered, within the per-namespace
	// cap of site bans.
	if diff := cmp.Diff(map[string]int{store.StateSessions: limit, store.StateCooldowns: limit, store.StateSiteBans: cycles}, snap.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// Issue 19: a lease is bound to the identity that acquired it, and an
// identity's leases are capped.
func TestLeaseBoundToItsOwner(t *testing.T) {
	ls := serveLive(t, func(c *store.Config) { c.MaxLeasesPerOwner = 1 }, nil)
	l := ls.acquire(`{"holder":"w"}`)
	for _, call := range []struct{ method, path string }{
		{http.MethodGet, "/v1/leases/" + l.ID},
		{http.MethodPost, "/v1/leases/" + l.ID + "/renew"},
		{http.MethodDelete, "/v1/leases/" + l.ID + "?outcome=banned&domain=example.com"},
	} {
		if code, e, _ := ls.call(call.method, call.path, "", otherToken); code != http.StatusNotFound || e.Code != wire.CodeNotFound {
			t.Errorf("%s by another identity: %d %+v, want 404", call.method, code, e)
		}
	}
	// The cap: one lease per identity; another identity still gets one.
	code, e, _ := ls.call(http.MethodPost, "/v1/leases", `{"holder":"w"}`)
	if code != http.StatusTooManyRequests || e.Code != wire.CodeTooManyLeases {
		t.Errorf("a second lease for one identity: %d %+v, want 429 TooManyLeases", code, e)
	}
	other := ls.acquire(`{"holder":"x"}`, otherToken)
	// The owner's calls work, and nothing the other tried counted.
	if code, e, _ := ls.call(http.MethodGet, "/v1/leases/"+l.ID, ""); code != http.StatusOK {
		t.Errorf("get by the owner: %d %+v", code, e)
	}
	if code, e, _ := ls.call(http.MethodDelete, "/v1/leases/"+l.ID, ""); code != http.StatusNoContent {
		t.Errorf("release by the owner: %d %+v", code, e)
	}
	if got := ls.metrics.Snapshot().Cooldowns; got != 0 {
		t.Errorf("%d cool-downs: another identity's banned release counted", got)
	}
	ls.acquire(`{"holder":"w"}`) // room again after the release
	if code, _, _ := ls.call(http.MethodDelete, "/v1/leases/"+other.ID, "", otherToken); code != http.StatusNoContent {
		t.Errorf("release by the other owner: %d", code)
	}
}
