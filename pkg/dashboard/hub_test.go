package dashboard

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// countingInputs counts how often the hub reads its inputs (rebuilds).
type countingInputs struct {
	mu     sync.Mutex
	in     Inputs
	builds int
}

func (c *countingInputs) read() Inputs {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.builds++
	return c.in
}

func (c *countingInputs) set(in Inputs) { c.mu.Lock(); defer c.mu.Unlock(); c.in = in }

func (c *countingInputs) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.builds }

// waitFor polls cond, yielding to the hub's goroutine, until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		runtime.Gosched()
	}
}

func TestHubRebuildsOncePerBurstAndPublishesOnlyChanges(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	in := &countingInputs{in: Inputs{Pools: []*crawlv1alpha1.ProxyPool{pool("a", "p", 3)}}}
	hub := NewHub(HubConfig{Inputs: in.read, Debounce: 200 * time.Millisecond, LeaseRefresh: time.Hour, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = hub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	leave := hub.Join() // a stream is open: the hub rebuilds as things change
	version := func() uint64 { _, v, _ := hub.Current(); return v }
	waitFor(t, "the first view", func() bool { return version() == 1 })
	_, _, changed := hub.Current()

	// A burst of three pokes is one rebuild, after the debounce.
	in.set(Inputs{Pools: []*crawlv1alpha1.ProxyPool{pool("a", "p", 5)}})
	hub.Poke()
	hub.Poke()
	hub.Poke()
	// The ticker and the debounce's timer.
	waitFor(t, "the hub waiting out the debounce", func() bool { return clk.Waiters() == 2 })
	if version() != 1 {
		t.Fatal("published before the debounce ended")
	}
	clk.Step(200 * time.Millisecond)
	waitFor(t, "the second view", func() bool { return version() == 2 })
	select {
	case <-changed:
	default:
		t.Fatal("viewers were not told of the new view")
	}
	if got := in.count(); got != 2 {
		t.Errorf("%d builds, want 2: the first and one for the burst", got)
	}
	if view, _, _ := hub.Current(); view.Pools[0].Desired != 5 {
		t.Errorf("published desired %d, want 5", view.Pools[0].Desired)
	}

	// A rebuild that changes nothing publishes nothing.
	_, _, changed = hub.Current()
	waitFor(t, "the hub idle", func() bool { return clk.Waiters() == 1 })
	hub.Poke()
	waitFor(t, "the hub waiting out the debounce", func() bool { return clk.Waiters() == 2 })
	clk.Step(200 * time.Millisecond)
	waitFor(t, "the third build", func() bool { return in.count() == 3 })
	// The lease refresh rebuilds without a poke; the loop is sequential, so
	// the fourth build also means the third has finished.
	waitFor(t, "the hub idle", func() bool { return clk.Waiters() == 1 })
	clk.Step(time.Hour)
	waitFor(t, "a rebuild on the lease refresh", func() bool { return in.count() == 4 })
	waitFor(t, "the hub idle", func() bool { return clk.Waiters() == 1 })
	if version() != 2 {
		t.Errorf("version %d after unchanged rebuilds, want 2", version())
	}
	select {
	case <-changed:
		t.Error("viewers were woken for an unchanged view")
	default:
	}

	// With no stream open a change only marks the view stale; the next
	// Current rebuilds it.
	leave()
	in.set(Inputs{Pools: []*crawlv1alpha1.ProxyPool{pool("a", "p", 7)}})
	clk.Step(time.Hour)
	waitFor(t, "the hub idle after the tick", func() bool { return hub.stale.Load() })
	if got := in.count(); got != 4 {
		t.Errorf("%d builds with nobody watching, want still 4", got)
	}
	if view, v, _ := hub.Current(); v != 3 || view.Pools[0].Desired != 7 || in.count() != 5 {
		t.Errorf("Current after idling: version %d, desired %d, %d builds; want 3, 7, 5", v, view.Pools[0].Desired, in.count())
	}
}
