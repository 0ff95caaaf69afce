package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// fencedServer is a leading server whose fence (Config.LeadershipValidUntil)
// the test moves with fenceAt, on the fake clock clk.
type fencedServer struct {
	clk     *clocktesting.FakeClock
	fenceAt func(time.Time)
	call    func(method, path, body string) *httptest.ResponseRecorder
}

func newFencedServer(t *testing.T) fencedServer {
	clk := clocktesting.NewFakeClock(t0)
	var until atomic.Pointer[time.Time]
	fenceAt := func(t time.Time) { until.Store(&t) }
	fenceAt(t0.Add(2 * time.Second))
	st, err := store.New(store.Config{Clock: clk, Key: testKey, LeadershipValidUntil: func() time.Time { return *until.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(newProxy("p1"))
	st.Upsert(newProxy("p2"))
	auth := &fakeAuth{}
	srv, err := New(Config{Store: st, Authenticator: auth, Authorizer: auth, Horizon: (&memHorizon{}).replica()})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	call := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+goodToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	return fencedServer{clk: clk, fenceAt: fenceAt, call: call}
}

type fenceAnswer struct {
	Status     int
	Code       string
	RetryAfter string
}

func fenceAnswerOf(t *testing.T, rec *httptest.ResponseRecorder) fenceAnswer {
	t.Helper()
	a := fenceAnswer{Status: rec.Code, RetryAfter: rec.Header().Get("Retry-After")}
	if rec.Code >= 400 {
		a.Code = errorOf(t, rec).Code
	}
	return a
}

var notLeaderAnswer = fenceAnswer{Status: http.StatusServiceUnavailable, Code: wire.CodeNotLeader, RetryAfter: "1"}

// A leader whose leadership may have passed (Config.LeadershipValidUntil)
// grants and renews nothing and is unready, but still takes releases; once
// the fence moves on (its leader Lease renewed) it grants again.
func TestFencedLeaderGrantsAndRenewsNothing(t *testing.T) {
	fs := newFencedServer(t)
	call, answerOf := fs.call, func(rec *httptest.ResponseRecorder) fenceAnswer { return fenceAnswerOf(t, rec) }

	held := acquireOver(t, call, `{"holder":"w1"}`)
	if got := answerOf(call(http.MethodGet, "/readyz", "")); got.Status != http.StatusOK {
		t.Errorf("readyz inside the fence: %+v, want 200", got)
	}

	fs.clk.Step(2 * time.Second) // at the fence: leadership may have passed
	for name, tc := range map[string]struct {
		method, path, body string
		want               fenceAnswer
	}{
		"acquire": {http.MethodPost, "/v1/leases", `{"holder":"w2"}`, notLeaderAnswer},
		"renew":   {http.MethodPost, "/v1/leases/" + held + "/renew", "", notLeaderAnswer},
		"readyz":  {http.MethodGet, "/readyz", "", notLeaderAnswer},
	} {
		if diff := cmp.Diff(tc.want, answerOf(call(tc.method, tc.path, tc.body))); diff != "" {
			t.Errorf("%s at the fence (-want +got):\n%s", name, diff)
		}
	}
	// A release only shortens what the successor waits for.
	if got := answerOf(call(http.MethodDelete, "/v1/leases/"+held, "")); got.Status != http.StatusNoContent {
		t.Errorf("release at the fence: %+v, want 204", got)
	}

	fs.fenceAt(fs.clk.Now().Add(2 * time.Second)) // the leader Lease renewed
	acquireOver(t, call, `{"holder":"w3"}`)
	if got := answerOf(call(http.MethodGet, "/readyz", "")); got.Status != http.StatusOK {
		t.Errorf("readyz after the fence moved on: %+v, want 200", got)
	}
}

// TestFencedLeaderKeepsNoState: at the fence both state calls are refused
// like grants (503 NotLeader): a successor may already lead, and the
// state a fenced leader took would be lost with it. Past the fence they
// are taken again.
func TestFencedLeaderKeepsNoState(t *testing.T) {
	fs := newFencedServer(t)
	held := acquireOver(t, fs.call, `{"holder":"w1","domain":"shop.example","session":"s1"}`)
	puts := map[string]string{
		"lease state":   "/v1/leases/" + held + "/state",
		"session state": "/v1/sessions/s1/state?domain=shop.example",
	}
	fs.clk.Step(2 * time.Second) // at the fence
	for call, path := range puts {
		if diff := cmp.Diff(notLeaderAnswer, fenceAnswerOf(t, fs.call(http.MethodPut, path, "jar"))); diff != "" {
			t.Errorf("%s at the fence (-want +got):\n%s", call, diff)
		}
	}
	fs.fenceAt(fs.clk.Now().Add(2 * time.Second)) // the leader Lease renewed
	for call, path := range puts {
		if got := fenceAnswerOf(t, fs.call(http.MethodPut, path, "jar")); got.Status != http.StatusNoContent {
			t.Errorf("%s after the fence moved on: %+v, want 204", call, got)
		}
	}
}

func acquireOver(t *testing.T, call func(method, path, body string) *httptest.ResponseRecorder, body string) string {
	t.Helper()
	rec := call(http.MethodPost, "/v1/leases", body)
	if rec.Code != http.StatusCreated {
		t.Fatalf("acquire %s: %d %s", body, rec.Code, rec.Body)
	}
	var l wire.Lease
	if err := json.NewDecoder(rec.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l.ID
}
