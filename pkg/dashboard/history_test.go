package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func TestHistoryRecord(t *testing.T) {
	h := NewHistory(HistoryConfig{Inputs: func() Inputs { return Inputs{} }, Length: 3})
	view := func(leased int, latencies ...int64) View {
		v := View{Pools: []PoolRow{{Namespace: "a", Name: "p", Leased: leased, Ready: 2, OK: int64(10 * leased), Outcomes: int64(11 * leased)}}}
		for i, l := range latencies {
			phase := "Ready"
			if i == 2 {
				phase = "Pending" // not counted in the mean
			}
			v.Members = append(v.Members, MemberRow{Namespace: "a", Pool: "p", Phase: phase, LatencyMillis: l})
		}
		return v
	}
	for i := range 4 {
		h.Record(t0.Add(time.Duration(i)*time.Minute), view(i, 10, 30, 1000))
	}
	want := []Sample{ // the oldest of four dropped: Length is 3
		{Millis: t0.Add(time.Minute).UnixMilli(), Leased: 1, Ready: 2, OK: 10, Outcomes: 11, LatencyMillis: 20},
		{Millis: t0.Add(2 * time.Minute).UnixMilli(), Leased: 2, Ready: 2, OK: 20, Outcomes: 22, LatencyMillis: 20},
		{Millis: t0.Add(3 * time.Minute).UnixMilli(), Leased: 3, Ready: 2, OK: 30, Outcomes: 33, LatencyMillis: 20},
	}
	if diff := cmp.Diff(want, h.Pool("a", "p")); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	h.Record(t0.Add(5*time.Minute), View{})
	if got := h.Pool("a", "p"); got != nil {
		t.Errorf("a deleted pool's samples are kept: %v", got)
	}
}

// TestHistoryRunSamplesEachInterval: samples are taken on the clock,
// whether or not a page is open.
func TestHistoryRunSamplesEachInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	in := Inputs{Pools: []*crawlv1alpha1.ProxyPool{pool("a", "p", 3)}}
	h := NewHistory(HistoryConfig{Inputs: func() Inputs { return in }, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the first sample", func() bool { return len(h.Pool("a", "p")) == 1 })
	for i := 2; i <= 3; i++ {
		waitFor(t, "the ticker", clk.HasWaiters)
		clk.Step(DefaultHistoryInterval)
		waitFor(t, "another sample", func() bool { return len(h.Pool("a", "p")) == i })
	}
	got := h.Pool("a", "p")
	if got[2].Millis-got[1].Millis != DefaultHistoryInterval.Milliseconds() {
		t.Errorf("samples %v are not an interval apart", got)
	}
}

// TestServeHistoryShowsOnlyVisiblePools: a viewer of namespace a gets a's
// pool's samples, and for b's the same empty answer as for a pool that
// does not exist.
func TestServeHistoryShowsOnlyVisiblePools(t *testing.T) {
	f := &fleet{in: twoNamespaces(1)}
	history := NewHistory(HistoryConfig{Inputs: f.inputs})
	history.Record(t0, Build(f.inputs()))
	h, err := NewHandler(Config{Hub: NewHub(HubConfig{Inputs: f.inputs}), History: history, Authenticator: callers{}, Authorizer: callers{}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, serve := range h.Routes() {
		mux.HandleFunc(pattern, serve)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(token, path string) (int, PoolHistory) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/api/history/"+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got PoolHistory
		_ = json.NewDecoder(resp.Body).Decode(&got)
		return resp.StatusCode, got
	}
	interval := DefaultHistoryInterval.Milliseconds()
	tests := []struct {
		token, path string
		wantStatus  int
		wantSamples int
	}{
		{"viewer", "a/p", http.StatusOK, 1},
		{"viewer", "b/q", http.StatusOK, 0},
		{"viewer", "a/none", http.StatusOK, 0},
		{"admin", "b/q", http.StatusOK, 1},
		{"stranger", "a/p", http.StatusUnauthorized, 0},
	}
	for _, tc := range tests {
		status, got := get(tc.token, tc.path)
		if status != tc.wantStatus || len(got.Samples) != tc.wantSamples || (status == http.StatusOK && got.IntervalMillis != interval) {
			t.Errorf("%s GET %s: %d with %d samples every %d ms, want %d with %d every %d ms",
				tc.token, tc.path, status, len(got.Samples), got.IntervalMillis, tc.wantStatus, tc.wantSamples, interval)
		}
	}
}
