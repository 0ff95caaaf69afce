package server

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// Fixtures of the server's tests: proxies, a recording store Metrics, and
// an in-memory failover.HorizonStore shared by replicas.

const testNamespace = "crawl"

var (
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	testKey = bytes.Repeat([]byte("0123456789abcdef"), 2)
)

// proxyOption shapes a test store.ProxyInfo.
type proxyOption func(*store.ProxyInfo)

// newProxy is a Ready proxy in testNamespace with latency 10ms and one slot.
func newProxy(name string, opts ...proxyOption) store.ProxyInfo {
	p := store.ProxyInfo{
		Key:           store.ObjectName{Namespace: testNamespace, Name: name},
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

func withLatency(ms int64) proxyOption   { return func(p *store.ProxyInfo) { p.LatencyMillis = ms } }
func withMaxLeases(n int32) proxyOption  { return func(p *store.ProxyInfo) { p.MaxLeases = n } }
func withUID(uid string) proxyOption     { return func(p *store.ProxyInfo) { p.UID = types.UID(uid) } }
func withURL(url string) proxyOption     { return func(p *store.ProxyInfo) { p.URL = url } }
func readySince(t time.Time) proxyOption { return func(p *store.ProxyInfo) { p.ReadySince = t } }
func notReady() proxyOption              { return func(p *store.ProxyInfo) { p.Ready = false } }
func inNamespace(ns string) proxyOption  { return func(p *store.ProxyInfo) { p.Key.Namespace = ns } }
func withLabels(kv ...string) proxyOption {
	return func(p *store.ProxyInfo) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
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

// waitForWaiters polls until n acquires wait in the store (its demand
// counts every waiting acquire a proxy in testNamespace would serve).
func waitForWaiters(t *testing.T, s *store.Store, n int) {
	t.Helper()
	eventually.Check(t, 10*time.Second, time.Millisecond, "waiting acquires", eventually.Holds(func() (bool, string) {
		d, err := s.Demand(testNamespace, labels.Set{})
		if err != nil {
			return false, err.Error()
		}
		return d.Waiting >= n, fmt.Sprintf("%d acquires waiting, want %d", d.Waiting, n)
	}))
}

// memHorizon is a failover.HorizonStore in memory, shared by the replicas of a test.
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
		return fmt.Errorf("term %d: %w", r.term, failover.ErrHorizonLost)
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

// waitUntil waits up to 10s for cond to hold (pkg/testing/eventually).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	eventually.Check(t, 10*time.Second, 5*time.Millisecond, "condition", eventually.Holds(func() (bool, string) { return cond(), "condition not met" }))
}
