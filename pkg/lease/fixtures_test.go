package lease

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

const testNamespace = "crawl"

var (
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	testKey = bytes.Repeat([]byte("0123456789abcdef"), 2)
)

// proxyOption shapes a test ProxyInfo.
type proxyOption func(*ProxyInfo)

// newProxy is a Ready proxy in testNamespace with latency 10ms and one slot.
func newProxy(name string, opts ...proxyOption) ProxyInfo {
	p := ProxyInfo{
		Key:           cache.NewObjectName(testNamespace, name),
		UID:           types.UID(name + "-uid"),
		Ready:         true,
		URL:           "http://127.0.0.1:3128/" + name,
		LatencyMillis: 10,
		MaxLeases:     1,
	}
	for _, opt := range opts {
		opt(&p)
	}
	return p
}

func withLatency(ms int64) proxyOption   { return func(p *ProxyInfo) { p.LatencyMillis = ms } }
func withMaxLeases(n int32) proxyOption  { return func(p *ProxyInfo) { p.MaxLeases = n } }
func withUID(uid string) proxyOption     { return func(p *ProxyInfo) { p.UID = types.UID(uid) } }
func withURL(url string) proxyOption     { return func(p *ProxyInfo) { p.URL = url } }
func readySince(t time.Time) proxyOption { return func(p *ProxyInfo) { p.ReadySince = t } }
func notReady() proxyOption              { return func(p *ProxyInfo) { p.Ready = false } }
func inNamespace(ns string) proxyOption  { return func(p *ProxyInfo) { p.Key.Namespace = ns } }
func withLabels(kv ...string) proxyOption {
	return func(p *ProxyInfo) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

type storeOption func(*Config)

func withStoreConfig(f func(*Config)) storeOption { return storeOption(f) }

// newTestStore is a leading store on a fake clock at t0, with no recovery
// and no horizon, holding proxies.
func newTestStore(t testing.TB, proxies []ProxyInfo, opts ...storeOption) (*Store, *clocktesting.FakeClock, *testMetrics) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := newTestMetrics()
	cfg := Config{Clock: clk, Key: testKey, Metrics: m}
	for _, opt := range opts {
		opt(&cfg)
	}
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		s.Upsert(p)
	}
	s.Lead(time.Time{}, time.Time{})
	return s, clk, m
}

// acquire acquires at once for holder "w", failing the test on error.
func acquire(t testing.TB, s *Store, req AcquireRequest) Lease {
	t.Helper()
	if req.Holder == "" {
		req.Holder = "w"
	}
	l, err := s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

func release(t testing.TB, s *Store, l Lease) {
	t.Helper()
	if err := s.Release(l.ID, OutcomeOK, ""); err != nil {
		t.Fatalf("Release(%s): %v", l.Proxy.Key, err)
	}
}

// testMetrics records what the store reports.
type testMetrics struct {
	mu         sync.Mutex
	acquires   map[string]int
	ends       map[string]int
	active     int
	cooldowns  int
	recovering bool
	// entries and evictions are the StateMetrics, by kind.
	entries, evictions map[string]int
}

func newTestMetrics() *testMetrics {
	return &testMetrics{acquires: map[string]int{}, ends: map[string]int{}}
}

func (m *testMetrics) ObserveAcquire(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquires[outcome]++
}
func (m *testMetrics) SetActiveLeases(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = n
}
func (m *testMetrics) ObserveLeaseEnd(end string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ends[end]++
}
func (m *testMetrics) SetCooldowns(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cooldowns = n
}
func (m *testMetrics) SetRecovering(r bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recovering = r
}

func (m *testMetrics) SetStateEntries(kind string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[string]int{}
	}
	m.entries[kind] = n
}
func (m *testMetrics) ObserveStateEviction(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.evictions == nil {
		m.evictions = map[string]int{}
	}
	m.evictions[kind]++
}

type metricsSnapshot struct {
	acquires           map[string]int
	ends               map[string]int
	active             int
	cooldowns          int
	recovering         bool
	entries, evictions map[string]int
}

func (m *testMetrics) snapshot() metricsSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return metricsSnapshot{acquires: maps.Clone(m.acquires), ends: maps.Clone(m.ends), active: m.active, cooldowns: m.cooldowns, recovering: m.recovering,
		entries: maps.Clone(m.entries), evictions: maps.Clone(m.evictions)}
}

// waitForTimer polls until a goroutine sleeps on the fake clock, so that a
// step reaches it.
func waitForTimer(t testing.TB, clk *clocktesting.FakeClock) {
	t.Helper()
	eventually.Check(t, 10*time.Second, time.Millisecond, "a timer on the fake clock", eventually.Holds(func() (bool, string) {
		return clk.HasWaiters(), "nobody waits on the fake clock"
	}))
}

// memHorizon is a HorizonStore in memory, shared by the replicas of a test.
type memHorizon struct {
	mu      sync.Mutex
	horizon time.Time
	term    int
	saves   int
	// failSaves makes Save fail, as an unreachable API server would.
	failSaves bool
}

// replica returns the view of one replica, which fences the others off when it claims.
func (w *memHorizon) replica() *memHorizonReplica { return &memHorizonReplica{shared: w} }

type memHorizonReplica struct {
	shared *memHorizon
	term   int
}

func (r *memHorizonReplica) Claim(context.Context) (time.Time, error) {
	r.shared.mu.Lock()
	defer r.shared.mu.Unlock()
	r.shared.term++
	r.term = r.shared.term
	return r.shared.horizon, nil
}

func (r *memHorizonReplica) Save(_ context.Context, t time.Time) error {
	r.shared.mu.Lock()
	defer r.shared.mu.Unlock()
	if r.term != r.shared.term {
		return fmt.Errorf("term %d: %w", r.term, ErrHorizonLost)
	}
	if r.shared.failSaves {
		return fmt.Errorf("save: API server unreachable")
	}
	r.shared.horizon = t
	r.shared.saves++
	return nil
}

func (w *memHorizon) get() (time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.horizon, w.saves
}
