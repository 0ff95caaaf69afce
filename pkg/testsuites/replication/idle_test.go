package replication_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// TestIdleGroupKeepsItsLeaderUnderLoad (issue 62, must-show 3): before any
// fault, three idle replicas keep one Raft leader on a loaded machine.
// Timers too tight for the machine show up here first, as elections
// nobody asked for. The long variant (make chaos) watches for 10 minutes
// with a busy loop on every core; a CI run for a while under the load of
// the other tests.
func TestIdleGroupKeepsItsLeaderUnderLoad(t *testing.T) {
	g := newGroup(t, 3)
	g.voters(startTimeout)
	leader := g.leader(startTimeout)
	before := g.leaderChanges()
	if slices.Contains(before, -1) {
		t.Fatalf("leader changes per replica: %v, -1 for none read", before)
	}
	if integration.Long() {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		for range runtime.NumCPU() {
			go spin(ctx)
		}
	}
	window := integration.Scaled(20*time.Second, 10*time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for end := time.Now().Add(window); time.Now().Before(end); <-tick.C {
		for _, r := range g.replicas {
			if !r.proc.Running() {
				t.Fatalf("%s stopped: %s", r.name, r.proc.Exit())
			}
		}
		if after := g.leaderChanges(); !slices.Contains(after, -1) && !slices.Equal(after, before) {
			t.Fatalf("leader changes per replica went from %v to %v while idle", before, after)
		}
	}
	if now := g.leader(startTimeout); now != leader {
		t.Fatalf("%s leads after %v idle, %s did before", now.name, window, leader.name)
	}
	t.Logf("one leader (%s) for %v idle; leader changes per replica %v throughout", leader.name, window, before)
}

// leaderChanges is each replica's count of Raft leader changes it saw
// (-1 where it cannot be read).
func (g *group) leaderChanges() []float64 {
	var out []float64
	for _, r := range g.replicas {
		v := -1.0
		if scraped, err := r.proc.Scrape(g.t.Context()); err == nil {
			v, _ = scraped.Value("proxy_operator_lease_store_raft_leader_changes_total", nil)
		}
		out = append(out, v)
	}
	return out
}

// spin keeps one core busy until ctx ends.
func spin(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		if n%1_000_000 == 0 {
			runtime.Gosched()
		}
	}
}
