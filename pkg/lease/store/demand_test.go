package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

// TestDemandCountsWaitersAndRefusalsThatAPoolWouldServe: a pool's members
// carry team=a; acquires that wait or are refused count for it when their
// namespace and selector would match those labels, each refused holder once,
// and a refusal ages out after RefusalWindow.
func TestDemandCountsWaitersAndRefusalsThatAPoolWouldServe(t *testing.T) {
	members := labels.Set{"team": "a", "crawl.proxyfleet.io/pool": "a"}
	sel := func(s string) labels.Selector {
		t.Helper()
		parsed, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return parsed
	}
	for name, tc := range map[string]struct {
		refused []AcquireRequest
		waiting []AcquireRequest
		after   time.Duration
		want    WaitDemand
	}{
		"nothing asked": {},
		"a matching refusal": {
			refused: []AcquireRequest{{Holder: "w1", Namespace: testNamespace, Selector: sel("team=a")}},
			want:    WaitDemand{Refused: 1},
		},
		"one holder refused three times counts once": {
			refused: []AcquireRequest{{Holder: "w1"}, {Holder: "w1"}, {Holder: "w1", Namespace: testNamespace}},
			want:    WaitDemand{Refused: 1},
		},
		"refusals elsewhere do not count": {
			refused: []AcquireRequest{
				{Holder: "w1", Namespace: "other"},
				{Holder: "w2", Selector: sel("team=b")},
				{Holder: "w3", Selector: sel("crawl.proxyfleet.io/pool=b")},
			},
		},
		"a refusal ages out": {
			refused: []AcquireRequest{{Holder: "w1"}},
			after:   RefusalWindow + time.Second,
		},
		"waiters count; a waiter refused before counts as waiting only": {
			refused: []AcquireRequest{{Holder: "w1"}},
			waiting: []AcquireRequest{{Holder: "w1", Selector: sel("team=a")}, {Holder: "w2", Namespace: testNamespace}, {Holder: "w3", Namespace: "other"}},
			want:    WaitDemand{Waiting: 2},
		},
	} {
		t.Run(name, func(t *testing.T) {
			// One proxy, held, so that every acquire finds nothing free.
			s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("busy", withLabels("team", "z"))})
			acquire(t, s, AcquireRequest{TTL: 5 * time.Minute})
			var notified []string
			var mu sync.Mutex
			s.NotifyDemand(func(ns string, _ labels.Selector) {
				mu.Lock()
				defer mu.Unlock()
				notified = append(notified, ns)
			})
			for _, req := range tc.refused {
				req.TTL = time.Minute
				if _, err := s.Acquire(context.Background(), req); !errors.Is(err, ErrNoneFree) {
					t.Fatalf("acquire %+v: %v, want NoneFree", req, err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, req := range tc.waiting {
				req.TTL, req.Wait = time.Minute, time.Minute
				wg.Go(func() { _, _ = s.Acquire(ctx, req) })
			}
			if len(tc.waiting) > 0 {
				waitForTimer(t, clk)
				waitForDemandWaiters(t, s, len(tc.waiting))
			}
			clk.Step(tc.after)
			got, err := s.Demand(testNamespace, members)
			cancel()
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(notified) != len(tc.refused)+len(tc.waiting) {
				t.Errorf("notified %d times (%v), want once per refusal and waiter (%d)", len(notified), notified, len(tc.refused)+len(tc.waiting))
			}
		})
	}
}

func waitForDemandWaiters(t *testing.T, s *Store, n int) {
	t.Helper()
	waitForWaiters(t, s, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.st.demand.waiters) != n {
		t.Fatalf("%d waiters registered for demand, %d waiting", len(s.st.demand.waiters), s.st.wake.waiting)
	}
}

// TestDemandNeedsALeader: a store that does not lead knows no demand.
func TestDemandNeedsALeader(t *testing.T) {
	s, _, _ := newTestStore(t, nil)
	s.Abdicate()
	if _, err := s.Demand(testNamespace, labels.Set{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Demand on a store that does not lead: %v, want ErrNotLeader", err)
	}
}

// TestWaiterLeavesDemandWhenGranted: a waiter granted a lease no longer counts.
func TestWaiterLeavesDemandWhenGranted(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	held := acquire(t, s, AcquireRequest{TTL: 5 * time.Minute})
	done := acquireAsync(t, context.Background(), s, clk, AcquireRequest{TTL: time.Minute, Wait: time.Minute})
	waitForDemandWaiters(t, s, 1)
	if d, _ := s.Demand(testNamespace, labels.Set{}); d.Waiting != 1 {
		t.Fatalf("demand %+v while one acquire waits", d)
	}
	release(t, s, held)
	if r := result(t, done); r.err != nil {
		t.Fatal(r.err)
	}
	if d, _ := s.Demand(testNamespace, labels.Set{}); d != (WaitDemand{}) {
		t.Errorf("demand %+v after the waiter was granted, want none", d)
	}
}
