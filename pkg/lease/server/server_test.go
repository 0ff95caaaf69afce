package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

const (
	goodToken   = "good-token"
	brokenToken = "broken-token" // the authenticator fails on it
	otherToken  = "other-token"  // another identity than goodToken's
)

// fakeAuth knows one token and allows what allow says; it records what it
// was asked to authorize.
type fakeAuth struct {
	mu    sync.Mutex
	allow func(auth.Attributes) bool
	seen  []auth.Attributes
	err   error // Authorize fails with it
}

func (a *fakeAuth) Authenticate(_ context.Context, token string) (auth.User, error) {
	switch token {
	case goodToken:
		return auth.User{Name: "crawler", Groups: []string{"crawlers"}}, nil
	case otherToken:
		return auth.User{Name: "other-crawler", UID: "u2", Groups: []string{"crawlers"}}, nil
	case brokenToken:
		return auth.User{}, errors.New("TokenReview: connection refused")
	case "":
		return auth.User{}, auth.ErrUnauthenticated
	}
	return auth.User{}, auth.ErrUnauthenticated
}

func (a *fakeAuth) Authorize(_ context.Context, _ auth.User, attrs auth.Attributes) (bool, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, attrs)
	if a.err != nil {
		return false, "", a.err
	}
	if a.allow != nil && !a.allow(attrs) {
		return false, "no RBAC rule allows it", nil
	}
	return true, "", nil
}

func (a *fakeAuth) asked() []auth.Attributes {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

type testServer struct {
	t         testing.TB
	srv       *Server
	store     *store.Store
	clk       *clocktesting.FakeClock
	auth      *fakeAuth
	persisted *memHorizon
	handler   http.Handler
}

type serverOption func(*Config)

// newTestServer is a leading server on a fake clock with an in-memory
// horizon (so no recovery), fakeAuth, and proxies p1 (latency 10) and p2
// (latency 20) in testNamespace.
func newTestServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	return newTestServerWithStore(t, nil, opts...)
}

// newTestServerWithStore is newTestServer with storeCfg (nil: none)
// adjusting the store's Config.
func newTestServerWithStore(t testing.TB, storeCfg func(*store.Config), opts ...serverOption) *testServer {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	cfg := store.Config{Clock: clk, Key: testKey}
	if storeCfg != nil {
		storeCfg(&cfg)
	}
	st, err := store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(newProxy("p1", withLatency(10)))
	st.Upsert(newProxy("p2", withLatency(20)))
	ts := &testServer{t: t, store: st, clk: clk, auth: &fakeAuth{}, persisted: &memHorizon{}}
	srvCfg := Config{Store: st, Authenticator: ts.auth, Authorizer: ts.auth, Horizon: ts.persisted.replica()}
	for _, opt := range opts {
		opt(&srvCfg)
	}
	if ts.srv, err = New(srvCfg); err != nil {
		t.Fatal(err)
	}
	ts.handler = ts.srv.Handler()
	_, ctx := ktesting.NewTestContext(t)
	if err := ts.srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	return ts
}

// do calls the handler with the good token unless token says otherwise.
func (ts *testServer) do(method, path, body string, token ...string) *httptest.ResponseRecorder {
	ts.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	tok := goodToken
	if len(token) > 0 {
		tok = token[0]
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	ts.handler.ServeHTTP(rec, req)
	return rec
}

func (ts *testServer) acquire(body string) wire.Lease {
	ts.t.Helper()
	rec := ts.do(http.MethodPost, "/v1/leases", body)
	if rec.Code != http.StatusCreated {
		ts.t.Fatalf("acquire: %d %s", rec.Code, rec.Body)
	}
	var l wire.Lease
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
		ts.t.Fatal(err)
	}
	return l
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) wire.ErrorBody {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e wire.Error
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body is not {\"error\":{...}}: %v", err)
	}
	return e.Error
}

func TestAcquireResponse(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.Credentials = func(_ context.Context, l store.Lease) (*proxyaccess.Credentials, error) {
			return &proxyaccess.Credentials{Username: "user-" + l.Proxy.Key.Name, Password: "s3cret"}, nil
		}
	})
	rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w1","namespace":"crawl","selector":"","ttl":"30s","domain":"Example.COM","session":"s"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	id, _ := got["id"].(string)
	if id == "" || rec.Header().Get("Location") != "/v1/leases/"+id {
		t.Errorf("id %q, Location %q", id, rec.Header().Get("Location"))
	}
	delete(got, "id")
	want := map[string]any{
		"holder":      "w1",
		"proxy":       map[string]any{"namespace": "crawl", "name": "p1", "url": newProxy("p1").URL, "latencyMillis": float64(10)},
		"credentials": map[string]any{"username": "user-p1", "password": "s3cret"},
		"session":     "s",
		"domain":      "example.com",
		"ttl":         "30s",
		"grantedAt":   t0.Format(time.RFC3339Nano),
		"expiresAt":   t0.Add(30 * time.Second).Format(time.RFC3339Nano),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("201 body (-want +got):\n%s", diff)
	}
	// A proxy's own credentials are in the grant only.
	for _, rec := range []*httptest.ResponseRecorder{
		ts.do(http.MethodPost, "/v1/leases/"+id+"/renew", ""),
		ts.do(http.MethodGet, "/v1/leases/"+id, ""),
		ts.do(http.MethodGet, "/v1/leases", ""),
		ts.do(http.MethodGet, "/v1/proxies", ""),
	} {
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "s3cret") || strings.Contains(rec.Body.String(), "credentials") {
			t.Errorf("%d %s: want 200 without credentials", rec.Code, rec.Body)
		}
	}
}

func TestAPIErrors(t *testing.T) {
	longBody := `{"holder":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
	for name, tc := range map[string]struct {
		method, path, body string
		token              *string
		notLeading         bool
		wantStatus         int
		wantCode           string
		wantField          string
		wantHeader         map[string]string
	}{
		"malformed JSON":      {method: "POST", path: "/v1/leases", body: `{"holder":`, wantStatus: 400, wantCode: "Invalid"},
		"not an object":       {method: "POST", path: "/v1/leases", body: `[1,2]`, wantStatus: 400, wantCode: "Invalid"},
		"empty body":          {method: "POST", path: "/v1/leases", body: ``, wantStatus: 400, wantCode: "Invalid"},
		"unknown field":       {method: "POST", path: "/v1/leases", body: `{"holder":"w","color":"red"}`, wantStatus: 400, wantCode: "Invalid", wantField: "color"},
		"trailing data":       {method: "POST", path: "/v1/leases", body: `{"holder":"w"} {}`, wantStatus: 400, wantCode: "Invalid"},
		"ttl as a number":     {method: "POST", path: "/v1/leases", body: `{"holder":"w","ttl":30}`, wantStatus: 400, wantCode: "Invalid", wantField: "ttl"},
		"ttl not a duration":  {method: "POST", path: "/v1/leases", body: `{"holder":"w","ttl":"soon"}`, wantStatus: 400, wantCode: "Invalid", wantField: "ttl"},
		"ttl too short":       {method: "POST", path: "/v1/leases", body: `{"holder":"w","ttl":"1s"}`, wantStatus: 400, wantCode: "Invalid", wantField: "ttl"},
		"wait too long":       {method: "POST", path: "/v1/leases", body: `{"holder":"w","wait":"2h"}`, wantStatus: 400, wantCode: "Invalid", wantField: "wait"},
		"no holder":           {method: "POST", path: "/v1/leases", body: `{}`, wantStatus: 400, wantCode: "Invalid", wantField: "holder"},
		"holder not a string": {method: "POST", path: "/v1/leases", body: `{"holder":{}}`, wantStatus: 400, wantCode: "Invalid", wantField: "holder"},
		"bad namespace":       {method: "POST", path: "/v1/leases", body: `{"holder":"w","namespace":"Not_A_NS"}`, wantStatus: 400, wantCode: "Invalid", wantField: "namespace"},
		"bad selector":        {method: "POST", path: "/v1/leases", body: `{"holder":"w","selector":"a in (b"}`, wantStatus: 400, wantCode: "Invalid", wantField: "selector"},
		"bad domain":          {method: "POST", path: "/v1/leases", body: `{"holder":"w","domain":"a b"}`, wantStatus: 400, wantCode: "Invalid", wantField: "domain"},
		"body too large":      {method: "POST", path: "/v1/leases", body: longBody, wantStatus: 413, wantCode: "RequestTooLarge"},
		"nothing fits": {method: "POST", path: "/v1/leases", body: `{"holder":"w","selector":"tier=none"}`, wantStatus: 503, wantCode: "NoneFree",
			wantHeader: map[string]string{"Retry-After": "1"}},
		"renew unknown":                {method: "POST", path: "/v1/leases/bm90LWEtbGVhc2U/renew", wantStatus: 404, wantCode: "NotFound"},
		"renew with a bad body":        {method: "POST", path: "/v1/leases/x/renew", body: `{"ttl":"1s","x":1}`, wantStatus: 400, wantCode: "Invalid", wantField: "x"},
		"release unknown":              {method: "DELETE", path: "/v1/leases/abc", wantStatus: 404, wantCode: "NotFound"},
		"release with a bad outcome":   {method: "DELETE", path: "/v1/leases/abc?outcome=great", wantStatus: 400, wantCode: "Invalid", wantField: "outcome"},
		"release with a bad parameter": {method: "DELETE", path: "/v1/leases/abc?outcom=ok", wantStatus: 400, wantCode: "Invalid", wantField: "outcom"},
		"release with a repeat":        {method: "DELETE", path: "/v1/leases/abc?domain=a&domain=b", wantStatus: 400, wantCode: "Invalid", wantField: "domain"},
		"release with negative bytes":  {method: "DELETE", path: "/v1/leases/abc?transferredBytes=-1", wantStatus: 400, wantCode: "Invalid", wantField: "transferredBytes"},
		"renew with bytes as a number": {method: "POST", path: "/v1/leases/x/renew", body: `{"transferredBytes":12}`, wantStatus: 400, wantCode: "Invalid", wantField: "transferredBytes"},
		"renew with bad okRequests":    {method: "POST", path: "/v1/leases/x/renew", body: `{"okRequests":"-3"}`, wantStatus: 400, wantCode: "Invalid", wantField: "okRequests"},
		"renew with too many bytes":    {method: "POST", path: "/v1/leases/x/renew", body: `{"transferredBytes":"99999999999999999"}`, wantStatus: 400, wantCode: "Invalid", wantField: "transferredBytes"},
		"get unknown":                  {method: "GET", path: "/v1/leases/abc", wantStatus: 404, wantCode: "NotFound"},
		"list with a bad namespace":    {method: "GET", path: "/v1/leases?namespace=-x", wantStatus: 400, wantCode: "Invalid", wantField: "namespace"},
		"proxies with a bad selector":  {method: "GET", path: "/v1/proxies?selector=%3D%3D", wantStatus: 400, wantCode: "Invalid", wantField: "selector"},
		"no such endpoint":             {method: "GET", path: "/v2/leases", wantStatus: 404, wantCode: "NotFound"},
		"no such method": {method: "PUT", path: "/v1/leases", wantStatus: 405, wantCode: "MethodNotAllowed",
			wantHeader: map[string]string{"Allow": "GET, HEAD, POST"}},
		"no token": {method: "GET", path: "/v1/leases", token: ptrTo(""), wantStatus: 401, wantCode: "Unauthorized",
			wantHeader: map[string]string{"WWW-Authenticate": `Bearer realm="proxy-operator lease API"`}},
		"a rejected token":          {method: "GET", path: "/v1/leases", token: ptrTo("forged"), wantStatus: 401, wantCode: "Unauthorized"},
		"authentication is down":    {method: "GET", path: "/v1/leases", token: ptrTo(brokenToken), wantStatus: 503, wantCode: "AuthUnavailable"},
		"forbidden":                 {method: "GET", path: "/v1/leases?namespace=secret", wantStatus: 403, wantCode: "Forbidden"},
		"not the leader: acquire":   {method: "POST", path: "/v1/leases", body: `{"holder":"w"}`, notLeading: true, wantStatus: 503, wantCode: "NotLeader"},
		"not the leader: proxies":   {method: "GET", path: "/v1/proxies", notLeading: true, wantStatus: 503, wantCode: "NotLeader"},
		"not the leader: readyz":    {method: "GET", path: "/readyz", notLeading: true, wantStatus: 503, wantCode: "NotLeader"},
		"not the leader, no token":  {method: "GET", path: "/v1/leases", token: ptrTo(""), notLeading: true, wantStatus: 503, wantCode: "NotLeader"},
		"garbage before authorized": {method: "POST", path: "/v1/leases", body: `{`, token: ptrTo(""), wantStatus: 401, wantCode: "Unauthorized"},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t)
			ts.auth.allow = func(a auth.Attributes) bool { return a.Namespace != "secret" }
			if tc.notLeading {
				if err := ts.srv.StopLeading(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			var rec *httptest.ResponseRecorder
			if tc.token != nil {
				rec = ts.do(tc.method, tc.path, tc.body, *tc.token)
			} else {
				rec = ts.do(tc.method, tc.path, tc.body)
			}
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			for k, v := range tc.wantHeader {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			e := errorOf(t, rec)
			if e.Code != tc.wantCode || e.Field != tc.wantField || e.Message == "" {
				t.Errorf("error %+v, want code %s field %q and a message", e, tc.wantCode, tc.wantField)
			}
			if tc.wantField != "" && !strings.Contains(e.Message, tc.wantField) {
				t.Errorf("message %q does not name the field %s", e.Message, tc.wantField)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestLeaseLifecycleOverHTTP(t *testing.T) {
	ts := newTestServer(t)
	first := ts.acquire(`{"holder":"w1","domain":"example.com"}`)
	second := ts.acquire(`{"holder":"w2"}`)
	if first.Proxy.Name != "p1" || second.Proxy.Name != "p2" {
		t.Fatalf("leases on %s and %s, want p1 and p2", first.Proxy.Name, second.Proxy.Name)
	}
	// Nothing left: 503 with a hint.
	if rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w3"}`); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("third acquire: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}

	ts.clk.Step(10 * time.Second)
	rec := ts.do(http.MethodPost, "/v1/leases/"+first.ID+"/renew", `{"ttl":"2m"}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("renew: %d %s", rec.Code, rec.Body)
	}
	var renewed wire.Lease
	if err := json.Unmarshal(rec.Body.Bytes(), &renewed); err != nil {
		t.Fatal(err)
	}
	if renewed.ID == first.ID || renewed.TTL != "2m0s" || !renewed.ExpiresAt.Equal(t0.Add(10*time.Second+2*time.Minute)) {
		t.Errorf("renewed %+v", renewed)
	}
	// An empty renew body keeps the TTL.
	if rec := ts.do(http.MethodPost, "/v1/leases/"+renewed.ID+"/renew", ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"ttl":"2m0s"`) {
		t.Errorf("renew without a body: %d %s", rec.Code, rec.Body)
	}

	var list wire.List[wire.Lease]
	rec = ts.do(http.MethodGet, "/v1/leases?holder=w1", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 1 || list.Items[0].Holder != "w1" {
		t.Errorf("list by holder: %d %s (%v)", rec.Code, rec.Body, err)
	}
	var proxies wire.List[wire.Proxy]
	rec = ts.do(http.MethodGet, "/v1/proxies?namespace=crawl", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &proxies); err != nil || len(proxies.Items) != 2 || proxies.Items[0].FreeLeases != 0 {
		t.Errorf("proxies: %d %s (%v)", rec.Code, rec.Body, err)
	}

	// Banned (for the lease's domain) and released.
	if rec := ts.do(http.MethodDelete, "/v1/leases/"+renewed.ID+"?outcome=banned", ""); rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("release: %d %s", rec.Code, rec.Body)
	}
	rec = ts.do(http.MethodPost, "/v1/leases", `{"holder":"w3","domain":"example.com"}`)
	if e := errorOf(t, rec); rec.Code != http.StatusServiceUnavailable || e.Code != wire.CodeCoolingDown || rec.Header().Get("Retry-After") != "60" {
		t.Errorf("acquire for the banned domain: %d %+v Retry-After %q", rec.Code, e, rec.Header().Get("Retry-After"))
	}
	if l := ts.acquire(`{"holder":"w3","domain":"other.example"}`); l.Proxy.Name != "p1" {
		t.Errorf("acquire for another domain got %s, want p1", l.Proxy.Name)
	}
	// Released leases are unknown; revoked ones gone.
	if rec := ts.do(http.MethodPost, "/v1/leases/"+renewed.ID+"/renew", ""); rec.Code != http.StatusNotFound {
		t.Errorf("renew after release: %d, want 404", rec.Code)
	}
	ts.store.Upsert(newProxy("p2", withLatency(20), notReady()))
	rec = ts.do(http.MethodPost, "/v1/leases/"+second.ID+"/renew", "")
	if e := errorOf(t, rec); rec.Code != http.StatusGone || e.Code != wire.CodeRevoked {
		t.Errorf("renew after the proxy left Ready: %d %+v, want 410 Revoked", rec.Code, e)
	}
}

func TestAuthorizationAttributes(t *testing.T) {
	ts := newTestServer(t)
	l := ts.acquire(`{"holder":"w","namespace":"crawl"}`)
	ts.acquire(`{"holder":"w"}`)
	ts.do(http.MethodPost, "/v1/leases/"+l.ID+"/renew", "")
	ts.do(http.MethodGet, "/v1/leases/"+l.ID, "")
	ts.do(http.MethodGet, "/v1/leases?namespace=crawl", "")
	ts.do(http.MethodGet, "/v1/leases", "")
	ts.do(http.MethodGet, "/v1/proxies?namespace=crawl", "")
	ts.do(http.MethodDelete, "/v1/leases/"+l.ID, "")
	want := []auth.Attributes{
		{Verb: auth.VerbCreate, Namespace: "crawl"},
		{Verb: auth.VerbCreate, Namespace: ""},
		{Verb: auth.VerbUpdate, Namespace: "crawl"},
		{Verb: auth.VerbGet, Namespace: "crawl"},
		{Verb: auth.VerbList, Namespace: "crawl"},
		{Verb: auth.VerbList, Namespace: ""},
		{Verb: auth.VerbList, Namespace: "crawl"},
		{Verb: auth.VerbDelete, Namespace: "crawl"},
	}
	if diff := cmp.Diff(want, ts.auth.asked()); diff != "" {
		t.Errorf("authorized attributes (-want +got):\n%s", diff)
	}
}

func TestForbiddenAndAuthorizationErrors(t *testing.T) {
	ts := newTestServer(t)
	l := ts.acquire(`{"holder":"w"}`)
	ts.auth.allow = func(a auth.Attributes) bool { return a.Verb != auth.VerbDelete }
	rec := ts.do(http.MethodDelete, "/v1/leases/"+l.ID, "")
	e := errorOf(t, rec)
	if rec.Code != http.StatusForbidden || !strings.Contains(e.Message, `"crawler" may not delete proxies/leases`) || !strings.Contains(e.Message, "namespace crawl") {
		t.Errorf("release without permission: %d %+v", rec.Code, e)
	}
	ts.auth.err = errors.New("SubjectAccessReview: timeout")
	if rec := ts.do(http.MethodGet, "/v1/leases", ""); rec.Code != http.StatusServiceUnavailable || errorOf(t, rec).Code != wire.CodeAuthUnavailable {
		t.Errorf("authorizer failing: %d %s", rec.Code, rec.Body)
	}
}

func TestCredentialsUnavailableReturnsTheLease(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.Credentials = func(context.Context, store.Lease) (*proxyaccess.Credentials, error) {
			return nil, errors.New("Secret crawl/auth not found")
		}
	})
	for range 3 { // more often than there are proxies: each failed grant is given back
		rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w"}`)
		if e := errorOf(t, rec); rec.Code != http.StatusInternalServerError || e.Code != wire.CodeCredentialsUnavailable {
			t.Fatalf("acquire: %d %+v", rec.Code, e)
		}
	}
	leases, err := ts.store.List(store.LeaseFilter{})
	if err != nil || len(leases) != 0 {
		t.Errorf("live leases after failed grants: %v (%v), want none", leases, err)
	}
}

// TestRenewalsCarryLeaseBoundCredentials: a proxy whose instance checks
// lease credentials gets fresh ones, for the renewed end, with each renewal.
func TestRenewalsCarryLeaseBoundCredentials(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.Credentials = func(_ context.Context, l store.Lease) (*proxyaccess.Credentials, error) {
			return &proxyaccess.Credentials{Username: "u", Password: "until-" + l.ExpiresAt.Format(time.RFC3339), LeaseBound: true}, nil
		}
	})
	l := ts.acquire(`{"holder":"w","ttl":"30s"}`)
	if l.Credentials == nil || l.Credentials.Password != "until-"+t0.Add(30*time.Second).Format(time.RFC3339) {
		t.Fatalf("grant's credentials %+v", l.Credentials)
	}
	ts.clk.Step(10 * time.Second)
	rec := ts.do(http.MethodPost, "/v1/leases/"+l.ID+"/renew", "")
	var renewed wire.Lease
	if err := json.Unmarshal(rec.Body.Bytes(), &renewed); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("renew: %d %s", rec.Code, rec.Body)
	}
	if renewed.Credentials == nil || renewed.Credentials.Password != "until-"+t0.Add(40*time.Second).Format(time.RFC3339) {
		t.Errorf("renewal's credentials %+v, want ones until the renewed end", renewed.Credentials)
	}
	for _, rec := range []*httptest.ResponseRecorder{ts.do(http.MethodGet, "/v1/leases/"+renewed.ID, ""), ts.do(http.MethodGet, "/v1/leases", "")} {
		if strings.Contains(rec.Body.String(), "credentials") {
			t.Errorf("a read shows credentials: %s", rec.Body)
		}
	}
}

// TestAGatewayOnlyProxyIsNotGrantedToACrawler: the credentials function's
// auth.ErrGatewayOnly (for a call not acting for a user) is a 403 naming
// the label, and the lease goes back; the gateway tier's call gets them.
func TestAGatewayOnlyProxyIsNotGrantedToACrawler(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.Credentials = func(ctx context.Context, _ store.Lease) (*proxyaccess.Credentials, error) {
			if !auth.ActingFor(ctx) {
				return nil, auth.ErrGatewayOnly
			}
			return &proxyaccess.Credentials{Username: "vendor", Password: "account-pw"}, nil
		}
	})
	rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w"}`)
	if e := errorOf(t, rec); rec.Code != http.StatusForbidden || e.Code != wire.CodeGatewayOnly || !strings.Contains(e.Message, "gateway-only") {
		t.Fatalf("a crawler's acquire: %d %+v", rec.Code, e)
	}
	if leases, _ := ts.store.List(store.LeaseFilter{}); len(leases) != 0 {
		t.Errorf("live leases after the refusal: %v", leases)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/leases", strings.NewReader(`{"holder":"w"}`))
	req.Header.Set("Authorization", "Bearer "+goodToken)
	req.Header.Set(wire.HeaderActForUser, "someone")
	rec = httptest.NewRecorder()
	ts.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), "account-pw") {
		t.Errorf("the gateway's acquire: %d %s", rec.Code, rec.Body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	ts := newTestServer(t)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		if rec := ts.do(http.MethodGet, path, "", ""); rec.Code != want {
			t.Errorf("%s while leading: %d, want %d", path, rec.Code, want)
		}
	}
	if err := ts.srv.StopLeading(t.Context()); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503} {
		if rec := ts.do(http.MethodGet, path, "", ""); rec.Code != want {
			t.Errorf("%s after leading: %d, want %d", path, rec.Code, want)
		}
	}
}

func TestServeTimeoutsAndShutdown(t *testing.T) {
	ts := newTestServer(t)
	ts.acquire(`{"holder":"w1"}`)
	ts.acquire(`{"holder":"w2"}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	served := make(chan error, 1)
	go func() { served <- ts.srv.Serve(ctx, ln) }()

	// A long poll is answered 503 when the server shuts down, not cut off.
	type answer struct {
		status int
		code   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/leases", strings.NewReader(`{"holder":"w3","wait":"50s"}`))
		req.Header.Set("Authorization", "Bearer "+goodToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var e wire.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		answered <- answer{status: resp.StatusCode, code: e.Error.Code, err: err}
	}()
	waitForWaiters(t, ts.store, 1)
	cancel()
	select {
	case a := <-answered:
		if a.err != nil || a.status != http.StatusServiceUnavailable || a.code != wire.CodeUnavailable {
			t.Errorf("waiting acquire at shutdown: %+v, want 503 Unavailable", a)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting acquire was not answered at shutdown")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"":                "",
		"Bearer abc":      "abc",
		"bearer abc":      "abc",
		"Bearer  abc ":    "abc",
		"Basic dXNlcjpw":  "",
		"Bearerabc":       "",
		"Token abc":       "",
		"Bearer a b":      "a b",
		"BEARER x.y.z":    "x.y.z",
		"Bearer":          "",
		"Bearer \t tok\t": "tok",
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		if got := bearerToken(req); got != want {
			t.Errorf("bearerToken(%q) = %q, want %q", header, got, want)
		}
	}
}

// TestDomainBudgetsFullAnswer: over HTTP the refusal is a 429
// DomainLimited whose message names the cap, with Retry-After.
func TestDomainBudgetsFullAnswer(t *testing.T) {
	ts := newTestServerWithStore(t, func(c *store.Config) { c.MaxDomainBudgets = 1 })
	ts.store.SetCrawlPolicy(store.CrawlPolicy{Key: store.ObjectName{Namespace: testNamespace, Name: "polite"},
		Default: &store.DomainLimits{MinInterval: time.Minute}})
	l := ts.acquire(`{"holder":"w","domain":"a.example"}`)
	if rec := ts.do(http.MethodDelete, "/v1/leases/"+l.ID, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("release: %d %s", rec.Code, rec.Body)
	}
	rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w","domain":"b.example"}`)
	e := errorOf(t, rec)
	if rec.Code != http.StatusTooManyRequests || e.Code != wire.CodeDomainLimited || !strings.Contains(e.Message, "--lease-max-domain-budgets") || rec.Header().Get("Retry-After") != "60" {
		t.Errorf("a new domain with the share pinned: %d %+v Retry-After %q; want 429 DomainLimited naming --lease-max-domain-budgets, Retry-After 60",
			rec.Code, e, rec.Header().Get("Retry-After"))
	}
}

// TestAFailedJoinKeepsTheSessionsLease: an acquire of a sticky session
// joins the session's live lease; when its credentials cannot be had then
// (a replica whose Secret lister lags), the answer is 500
// CredentialsUnavailable and the session's lease, which the session's
// other calls hold, is not ended with it.
func TestAFailedJoinKeepsTheSessionsLease(t *testing.T) {
	var failing atomic.Bool
	ts := newTestServer(t, func(c *Config) {
		c.Credentials = func(context.Context, store.Lease) (*proxyaccess.Credentials, error) {
			if failing.Load() {
				return nil, errors.New("secret not listed yet")
			}
			return &proxyaccess.Credentials{Username: "u", Password: "p"}, nil
		}
	})
	ts.acquire(`{"holder":"w","session":"s1"}`)
	failing.Store(true)
	rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w","session":"s1"}`)
	if e := errorOf(t, rec); rec.Code != http.StatusInternalServerError || e.Code != wire.CodeCredentialsUnavailable || !strings.Contains(e.Message, "ends with its TTL") {
		t.Fatalf("the failed join: %d %+v", rec.Code, e)
	}
	if leases, _ := ts.store.List(store.LeaseFilter{}); len(leases) != 1 || leases[0].Session == "" {
		t.Errorf("the session's lease after the failed join: %+v, want it live", leases)
	}
}
