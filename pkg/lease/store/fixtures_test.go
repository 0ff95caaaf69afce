package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule/site"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

const testNamespace = storetest.Namespace

var (
	t0      = storetest.T0
	testKey = storetest.Key
)

// proxyOption shapes a test ProxyInfo.
type proxyOption func(*ProxyInfo)

// newProxy is a Ready proxy in testNamespace with latency 10ms and one slot.
func newProxy(name string, opts ...proxyOption) ProxyInfo {
	p := ProxyInfo{
		Key:           ObjectName{testNamespace, name},
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
func newTestStore(t testing.TB, proxies []ProxyInfo, opts ...storeOption) (*Store, *clocktesting.FakeClock, *storetest.Metrics) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m := storetest.NewMetrics()
	cfg := Config{Clock: clk, Key: testKey, Metrics: m, Site: site.Of}
	for _, opt := range opts {
		opt(&cfg)
	}
	s, err := New(cfg)
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
	if err := s.ReleaseAs("", l.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatalf("Release(%s): %v", l.Proxy.Key, err)
	}
}

// waitForTimer polls until a goroutine sleeps on the fake clock, so that a
// step reaches it.
func waitForTimer(t testing.TB, clk *clocktesting.FakeClock) {
	t.Helper()
	eventually.Check(t, 10*time.Second, time.Millisecond, "a timer on the fake clock", eventually.Holds(func() (bool, string) {
		return clk.HasWaiters(), "nobody waits on the fake clock"
	}))
}

// waitForWaiters polls until n acquires wait in the store.
func waitForWaiters(t *testing.T, s *Store, n int) {
	t.Helper()
	eventually.Check(t, 10*time.Second, time.Millisecond, "waiting acquires", eventually.Holds(func() (bool, string) {
		s.mu.Lock()
		waiting := s.st.wake.waiting
		s.mu.Unlock()
		return waiting >= n, fmt.Sprintf("%d acquires waiting, want %d", waiting, n)
	}))
}

// StateBytes and StateEntries are StateUse's two answers, for the tests.
func (s *Store) StateBytes() int {
	n, _ := s.StateUse()
	return n
}

func (s *Store) StateEntries() int {
	_, n := s.StateUse()
	return n
}
