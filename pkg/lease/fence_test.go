package lease

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

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// A leader whose leadership may have passed (Config.LeadershipValidUntil)
// grants and renews nothing and is unready, but still takes releases; once
// the fence moves on (its leader Lease renewed) it grants again.
func TestFencedLeaderGrantsAndRenewsNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	var until atomic.Pointer[time.Time]
	fenceAt := func(t time.Time) { until.Store(&t) }
	fenceAt(t0.Add(2 * time.Second))
	store, err := NewStore(Config{Clock: clk, Key: testKey, LeadershipValidUntil: func() time.Time { return *until.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	store.Upsert(newProxy("p1"))
	store.Upsert(newProxy("p2"))
	auth := &fakeAuth{}
	srv, err := NewServer(ServerConfig{Store: store, Authenticator: auth, Authorizer: auth, Horizon: (&memHorizon{}).replica()})
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
	type answer struct {
		Status     int
		Code       string
		RetryAfter string
	}
	answerOf := func(rec *httptest.ResponseRecorder) answer {
		a := answer{Status: rec.Code, RetryAfter: rec.Header().Get("Retry-After")}
		if rec.Code >= 400 {
			a.Code = errorOf(t, rec).Code
		}
		return a
	}

	held := acquireOver(t, call, `{"holder":"w1"}`)
	if got := answerOf(call(http.MethodGet, "/readyz", "")); got.Status != http.StatusOK {
		t.Errorf("readyz inside the fence: %+v, want 200", got)
	}

	clk.Step(2 * time.Second) // at the fence: leadership may have passed
	notLeader := answer{Status: http.StatusServiceUnavailable, Code: codeNotLeader, RetryAfter: "1"}
	for name, tc := range map[string]struct {
		method, path, body string
		want               answer
	}{
		"acquire": {http.MethodPost, "/v1/leases", `{"holder":"w2"}`, notLeader},
		"renew":   {http.MethodPost, "/v1/leases/" + held + "/renew", "", notLeader},
		"readyz":  {http.MethodGet, "/readyz", "", notLeader},
	} {
		if diff := cmp.Diff(tc.want, answerOf(call(tc.method, tc.path, tc.body))); diff != "" {
			t.Errorf("%s at the fence (-want +got):\n%s", name, diff)
		}
	}
	// A release only shortens what the successor waits for.
	if got := answerOf(call(http.MethodDelete, "/v1/leases/"+held, "")); got.Status != http.StatusNoContent {
		t.Errorf("release at the fence: %+v, want 204", got)
	}

	fenceAt(clk.Now().Add(2 * time.Second)) // the leader Lease renewed
	acquireOver(t, call, `{"holder":"w3"}`)
	if got := answerOf(call(http.MethodGet, "/readyz", "")); got.Status != http.StatusOK {
		t.Errorf("readyz after the fence moved on: %+v, want 200", got)
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
