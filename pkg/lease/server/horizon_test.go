package server

import (
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// TestHorizonFollowsGrants checks that the persisted horizon stays ahead of
// every expiry handed out, with few writes, and that the next leader waits
// exactly until it (plus the clock skew).
func TestHorizonFollowsGrants(t *testing.T) {
	ts := newTestServer(t)
	const step = DefaultHorizonStep
	var latest time.Time
	for i := range 40 {
		l := ts.acquire(`{"holder":"w","ttl":"30s"}`)
		latest = l.ExpiresAt
		ts.do("DELETE", "/v1/leases/"+l.ID, "")
		ts.clk.Step(time.Second)
		// The background extension may still be writing; wait for it.
		waitUntil(t, func() bool { return !ts.srv.horizon.extending.Load() })
		horizon, _ := ts.persisted.get()
		if horizon.Before(latest) {
			t.Fatalf("grant %d: persisted horizon %v is before an expiry handed out, %v", i, horizon, latest)
		}
		if horizon.After(latest.Add(2 * step)) {
			t.Fatalf("grant %d: persisted horizon %v runs more than two steps ahead of %v", i, horizon, latest)
		}
	}
	if _, saves := ts.persisted.get(); saves > 40/int(step/time.Second)+2 {
		t.Errorf("%d horizon writes for 40 grants a second apart, want about one per %v", saves, step/2)
	}

	// A successor after a crash (no StopLeading) waits until the horizon.
	next := ts.successor(t)
	horizon, _ := ts.persisted.get()
	rec := next.do("POST", "/v1/leases", `{"holder":"w"}`)
	if e := errorOf(t, rec); rec.Code != 503 || e.Code != wire.CodeRecovering {
		t.Fatalf("successor's acquire: %d %+v, want 503 Recovering", rec.Code, e)
	}
	wantRetry := horizon.Add(DefaultMaxClockSkew).Sub(ts.clk.Now())
	if got := rec.Header().Get("Retry-After"); got != retryAfterSeconds(wantRetry) {
		t.Errorf("Retry-After %s, want %s", got, retryAfterSeconds(wantRetry))
	}
	ts.clk.Step(wantRetry)
	next.acquire(`{"holder":"w"}`)
}

func retryAfterSeconds(d time.Duration) string {
	rec := &headerRecorder{header: map[string][]string{}}
	setRetryAfter(rec, d)
	return rec.header.Get("Retry-After")
}

// successor is a second replica sharing ts's clock, key and horizon store,
// leading after ts (which is not told).
func (ts *testServer) successor(t *testing.T) *testServer {
	t.Helper()
	st, err := store.New(store.Config{Clock: ts.clk, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ts.store.Proxies("", nil) {
		st.Upsert(store.ProxyInfo{Key: p.Key, UID: newProxy(p.Key.Name).UID, Ready: true, URL: p.URL, Labels: p.Labels, LatencyMillis: p.LatencyMillis, MaxLeases: p.MaxLeases})
	}
	next := &testServer{t: t, store: st, clk: ts.clk, auth: ts.auth, persisted: ts.persisted}
	if next.srv, err = New(Config{Store: st, Authenticator: ts.auth, Authorizer: ts.auth, Horizon: ts.persisted.replica()}); err != nil {
		t.Fatal(err)
	}
	next.handler = next.srv.Handler()
	ts.clk.Step(time.Millisecond) // terms start apart
	_, ctx := ktesting.NewTestContext(t)
	if err := next.srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	return next
}

func TestGracefulHandoverWaitsOnlyForLiveLeases(t *testing.T) {
	for name, tc := range map[string]struct {
		live      bool
		wantRetry time.Duration // of the successor's first acquire; 0: granted at once
	}{
		"no live leases": {},
		"a live lease":   {live: true, wantRetry: 20*time.Second + DefaultMaxClockSkew},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t)
			l := ts.acquire(`{"holder":"w","ttl":"30s"}`)
			ts.clk.Step(10 * time.Second)
			if !tc.live {
				ts.do("DELETE", "/v1/leases/"+l.ID, "")
			}
			_, ctx := ktesting.NewTestContext(t)
			if err := ts.srv.StopLeading(ctx); err != nil {
				t.Fatal(err)
			}
			next := ts.successor(t)
			rec := next.do("POST", "/v1/leases", `{"holder":"w2"}`)
			if tc.wantRetry == 0 {
				if rec.Code != 201 {
					t.Errorf("successor's acquire: %d %s, want 201", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != 503 || rec.Header().Get("Retry-After") != retryAfterSeconds(tc.wantRetry-time.Millisecond) {
				t.Errorf("successor's acquire: %d Retry-After %s, want 503 after %v", rec.Code, rec.Header().Get("Retry-After"), tc.wantRetry)
			}
			// The live lease renews on the successor meanwhile.
			if rec := next.do("POST", "/v1/leases/"+l.ID+"/renew", ""); rec.Code != 200 {
				t.Errorf("renew on the successor: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestHorizonWriteFailures(t *testing.T) {
	ts := newTestServer(t)
	ts.persisted.mu.Lock()
	ts.persisted.failSaves = true
	ts.persisted.mu.Unlock()
	rec := ts.do("POST", "/v1/leases", `{"holder":"w"}`)
	if e := errorOf(t, rec); rec.Code != 503 || e.Code != wire.CodeUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("acquire while the horizon cannot be persisted: %d %+v", rec.Code, e)
	}
	ts.persisted.mu.Lock()
	ts.persisted.failSaves = false
	ts.persisted.mu.Unlock()
	ts.acquire(`{"holder":"w"}`)
}

func TestWithoutAHorizonStoreRecoveryLastsTheMaxTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, err := store.New(store.Config{Clock: clk, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(newProxy("p1"))
	auth := &fakeAuth{}
	srv, err := New(Config{Store: st, Authenticator: auth, Authorizer: auth})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, srv: srv, store: st, clk: clk, auth: auth, handler: srv.Handler()}
	rec := ts.do("POST", "/v1/leases", `{"holder":"w"}`)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != retryAfterSeconds(store.DefaultMaxTTL+DefaultMaxClockSkew) {
		t.Errorf("acquire at start: %d Retry-After %s", rec.Code, rec.Header().Get("Retry-After"))
	}
	clk.Step(store.DefaultMaxTTL + DefaultMaxClockSkew)
	ts.acquire(`{"holder":"w"}`)
}
