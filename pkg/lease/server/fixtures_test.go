package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// Fixtures of the server's tests: proxies, a recording store Metrics, and
// an in-memory failover.HorizonStore shared by replicas.

const testNamespace = storetest.Namespace

var (
	t0      = storetest.T0
	testKey = storetest.Key
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
