package push

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// instance records the pushes it takes, verified with its keys; fail
// makes it answer 503 (or any status) until cleared.
type instance struct {
	keys []leasecred.Key
	srv  *httptest.Server

	mu     sync.Mutex
	pushes [][]leasecred.Update
	status int
}

func newInstance(t *testing.T) *instance {
	t.Helper()
	text, _ := leasecred.NewKeyText()
	keys, _ := leasecred.ParseKeys(text)
	in := &instance{keys: keys}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.status != 0 {
			w.WriteHeader(in.status)
			return
		}
		updates, err := leasecred.VerifyPush(in.keys, body, r.Header.Get("Authorization"))
		if err != nil || r.URL.Path != leasecred.PushPath {
			http.Error(w, fmt.Sprint(err), http.StatusForbidden)
			return
		}
		in.pushes = append(in.pushes, updates)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(in.srv.Close)
	return in
}

func (in *instance) target() Target {
	return Target{Addr: strings.TrimPrefix(in.srv.URL, "http://"), Keys: in.keys}
}

func (in *instance) taken() [][]leasecred.Update {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pushes
}

func (in *instance) answer(status int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.status = status
}

type recordingMetrics struct {
	mu      sync.Mutex
	results map[string]int
	dropped int
}

func (m *recordingMetrics) ObservePush(r string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.results[r]++
}
func (m *recordingMetrics) SetPushPending(int) {}
func (m *recordingMetrics) PushUpdatesDropped(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropped += n
}

func (m *recordingMetrics) count(r string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[r]
}

// start runs a Pusher on a fake clock; resolve answers for proxies it has
// not met.
func start(t *testing.T, resolve Resolver) (*Pusher, *clocktesting.FakeClock, *recordingMetrics) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := &recordingMetrics{results: map[string]int{}}
	if resolve == nil {
		resolve = func(store.ObjectName, types.UID) (Target, bool) { return Target{}, false }
	}
	p, err := New(Config{Resolve: resolve, Clock: clk, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p, clk, m
}

// tick moves the clock one interval once Run waits on its ticker.
func tick(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	eventually.Check(t, 10*time.Second, time.Millisecond, "Run waits on its ticker", eventually.Holds(func() (bool, string) {
		return clk.HasWaiters(), "no waiter"
	}))
	clk.Step(DefaultInterval)
}

func lease(proxy string, serial uint64, granted time.Time, ttl, renewedAt time.Duration) store.Lease {
	return store.Lease{
		Ref:   store.LeaseRef{Epoch: 1, Serial: serial},
		Proxy: store.LeasedProxy{Key: store.ObjectName{Namespace: "crawl", Name: proxy}, UID: types.UID(proxy + "-uid")},
		TTL:   ttl, GrantedAt: granted, ExpiresAt: granted.Add(renewedAt + ttl),
	}
}

// TestUpdatesAreBatchedPerInstance: the renewals and ends of leases on two
// proxies of one instance go in one push; a fresh grant is not pushed.
func TestUpdatesAreBatchedPerInstance(t *testing.T) {
	in := newInstance(t)
	p, clk, _ := start(t, nil)
	fresh := lease("a", 1, t0, time.Minute, 0)
	renewed := lease("a", 2, t0, time.Minute, 20*time.Second)
	ended := lease("b", 3, t0, time.Minute, 0)
	p.Signed(fresh, in.target())
	p.Signed(renewed, in.target())
	p.Signed(ended, in.target())
	p.Ended(store.EndedLease{Proxy: ended.Proxy.Key, ProxyUID: ended.Proxy.UID, Ref: ended.Ref, ExpiresAt: ended.ExpiresAt, End: store.EndReleasedOK})
	// A renewal and the end of one lease: the end wins.
	p.Signed(lease("a", 2, t0, time.Minute, 40*time.Second), in.target())
	p.Ended(store.EndedLease{Proxy: renewed.Proxy.Key, ProxyUID: renewed.Proxy.UID, Ref: renewed.Ref, ExpiresAt: renewed.ExpiresAt, End: store.EndRevoked})
	tick(t, clk)
	eventually.Check(t, 10*time.Second, time.Millisecond, "one push", eventually.Holds(func() (bool, string) {
		return len(in.taken()) == 1, fmt.Sprintf("%d pushes", len(in.taken()))
	}))
	got := map[leasecred.Ref]leasecred.Update{}
	for _, u := range in.taken()[0] {
		got[u.Ref] = u
	}
	want := map[leasecred.Ref]leasecred.Update{
		{Epoch: 1, Serial: 2}: {Ref: leasecred.Ref{Epoch: 1, Serial: 2}, Until: t0.Add(100 * time.Second), Ended: true},
		{Epoch: 1, Serial: 3}: {Ref: leasecred.Ref{Epoch: 1, Serial: 3}, Until: t0.Add(time.Minute), Ended: true},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("push (-want +got):\n%s", diff)
	}
}

// TestAFailedPushIsRetriedUntilItNoLongerMatters: an unreachable instance
// gets the update again at the next interval; once every credential of
// the lease has expired it is dropped.
func TestAFailedPushIsRetriedUntilItNoLongerMatters(t *testing.T) {
	in := newInstance(t)
	in.answer(http.StatusServiceUnavailable)
	p, clk, m := start(t, nil)
	l := lease("a", 1, t0, 5*time.Second, 0)
	p.Signed(l, in.target())
	p.Ended(store.EndedLease{Proxy: l.Proxy.Key, ProxyUID: l.Proxy.UID, Ref: l.Ref, ExpiresAt: l.ExpiresAt})
	tick(t, clk)
	eventually.Check(t, 10*time.Second, time.Millisecond, "a failed push", eventually.Holds(func() (bool, string) {
		return m.count(ResultFailed) == 1, fmt.Sprintf("%d failed", m.count(ResultFailed))
	}))
	in.answer(0)
	tick(t, clk)
	eventually.Check(t, 10*time.Second, time.Millisecond, "the retry", eventually.Holds(func() (bool, string) {
		return len(in.taken()) == 1, fmt.Sprintf("%d pushes", len(in.taken()))
	}))

	// Past the lease's expiry, an update is dropped, not sent.
	in.answer(http.StatusServiceUnavailable)
	l2 := lease("a", 2, clk.Now(), 5*time.Second, 0)
	p.Ended(store.EndedLease{Proxy: l2.Proxy.Key, ProxyUID: l2.Proxy.UID, Ref: l2.Ref, ExpiresAt: l2.ExpiresAt})
	for range 12 { // 6 s of intervals
		tick(t, clk)
	}
	// A failed send still on its way at the last tick puts the update
	// back for the next interval: keep the intervals coming until it is
	// taken past its expiry.
	eventually.Check(t, 10*time.Second, time.Millisecond, "the update dropped", eventually.Holds(func() (bool, string) {
		m.mu.Lock()
		dropped := m.dropped
		m.mu.Unlock()
		if dropped == 0 && clk.HasWaiters() {
			clk.Step(DefaultInterval)
		}
		return dropped == 1, fmt.Sprintf("%d dropped", dropped)
	}))
}

// TestAnInstanceThatRefusesIsNotRetried: another key (403) or none (404)
// is not fixed by retrying.
func TestAnInstanceThatRefusesIsNotRetried(t *testing.T) {
	in := newInstance(t)
	p, clk, m := start(t, nil)
	other := in.target()
	text, _ := leasecred.NewKeyText()
	other.Keys, _ = leasecred.ParseKeys(text)
	l := lease("a", 1, t0, time.Minute, 0)
	p.Signed(l, other)
	p.Ended(store.EndedLease{Proxy: l.Proxy.Key, ProxyUID: l.Proxy.UID, Ref: l.Ref, ExpiresAt: l.ExpiresAt})
	tick(t, clk)
	eventually.Check(t, 10*time.Second, time.Millisecond, "a refused push", eventually.Holds(func() (bool, string) {
		return m.count(ResultRefused) == 1, fmt.Sprintf("%d refused", m.count(ResultRefused))
	}))
	tick(t, clk)
	tick(t, clk)
	if n := m.count(ResultRefused) + m.count(ResultFailed) + m.count(ResultOK); n != 1 {
		t.Errorf("%d pushes, want the one", n)
	}
}

// TestALeaseOfAPreviousLeaderIsResolved: the end of a lease this leader
// never signed for reaches the instance the resolver names; a proxy whose
// instance checks nothing is skipped.
func TestALeaseOfAPreviousLeaderIsResolved(t *testing.T) {
	in := newInstance(t)
	p, clk, m := start(t, func(key store.ObjectName, uid types.UID) (Target, bool) {
		return in.target(), key.Name == "a" && uid == "a-uid"
	})
	for _, name := range []string{"a", "squid"} {
		l := lease(name, 1, t0, time.Minute, 0)
		p.Ended(store.EndedLease{Proxy: l.Proxy.Key, ProxyUID: l.Proxy.UID, Ref: l.Ref, ExpiresAt: l.ExpiresAt})
	}
	tick(t, clk)
	eventually.Check(t, 10*time.Second, time.Millisecond, "one push", eventually.Holds(func() (bool, string) {
		return len(in.taken()) == 1 && len(in.taken()[0]) == 1, fmt.Sprintf("pushes %v", in.taken())
	}))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dropped != 1 {
		t.Errorf("%d updates dropped, want squid's", m.dropped)
	}
}
