package replication_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// grantLog records when each grant through any replica was answered.
type grantLog struct {
	mu     sync.Mutex
	grants []time.Time
}

func (l *grantLog) add(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grants = append(l.grants, at)
}

// firstAfter is the first grant answered after t, zero if none yet.
func (l *grantLog) firstAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.grants {
		if g.After(t) {
			return g
		}
	}
	return time.Time{}
}

// workers acquire and release through every replica, each acquire sent to
// a random replica, until ctx ends.
func (g *group) workers(ctx context.Context, n int, log *grantLog) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				r := g.replicas[rng.IntN(len(g.replicas))]
				l, err := r.api.Acquire(ctx, client.AcquireRequest{Holder: "worker", Namespace: g.ns, Wait: 2 * time.Second})
				if err != nil {
					continue // a replica down, no leader yet: another try
				}
				log.add(time.Now())
				g.release(ctx, rng, l.ID)
			}
		})
	}
	return &wg
}

// release gives a lease back as a careful client does: through another
// replica when one is down, until an answer says it is done. A release
// left undone would hold its proxy for a TTL, and after each promotion a
// TTL more (the new leader cannot know of renewals that were not logged).
func (g *group) release(ctx context.Context, rng *rand.Rand, id string) {
	for ctx.Err() == nil {
		err := g.replicas[rng.IntN(len(g.replicas))].api.Release(ctx, id, client.OutcomeOK, "")
		if err == nil || errors.Is(err, client.ErrLeaseLost) {
			return
		}
	}
}

// TestLeaderKilledGrantsResume (issue 62): three replicas, eight workers
// acquiring and releasing through all of them; the leader is killed
// (SIGKILL) three times and comes back (as a container restarts, with its
// Raft log). After each kill another replica leads, a lease granted before
// is still renewable, the ban of a proxy for a site still holds, and grants
// resume. The time to the first grant is reported (make chaos kills twenty
// times and reports p50 and the worst).
func TestLeaderKilledGrantsResume(t *testing.T) {
	g := newGroup(t, 3)
	g.voters(startTimeout)
	g.fleet(12)
	held, err := g.replicas[0].api.Acquire(t.Context(), client.AcquireRequest{Holder: "keeper", Namespace: g.ns, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	banned, err := g.replicas[1].api.Acquire(t.Context(), client.AcquireRequest{Holder: "banned", Namespace: g.ns, Domain: "ban.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.replicas[2].api.Release(t.Context(), banned.ID, client.OutcomeBanned, ""); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	log := &grantLog{}
	wg := g.workers(ctx, 8, log)
	var firsts []time.Duration
	for range 3 {
		l := g.leader(startTimeout)
		killed := time.Now()
		l.proc.Kill()
		next := g.leader(startTimeout)
		if next == l {
			t.Fatalf("%s leads again right after its kill", l.name)
		}
		eventually.Check(t, startTimeout, pollInterval, "a grant after the kill", eventually.Holds(func() (bool, string) {
			return !log.firstAfter(killed).IsZero(), "no grant yet"
		}))
		firsts = append(firsts, log.firstAfter(killed).Sub(killed))
		// The keeper's lease lives on: renewed through the new leader.
		renewed, err := next.api.Renew(t.Context(), held.ID, 10*time.Second)
		if err != nil {
			t.Fatalf("renewing a lease granted before the kill: %v", err)
		}
		held = renewed
		// The ban holds: the banned proxy is never granted for the site.
		// The leases taken to see it go back at once, so the workers keep
		// the pool's spare proxies.
		for range 3 {
			l, err := next.api.Acquire(t.Context(), client.AcquireRequest{Holder: "banned", Namespace: g.ns, Domain: "ban.example", Wait: time.Second})
			if err != nil {
				break
			}
			if l.Proxy.Name == banned.Proxy.Name {
				t.Errorf("after the kill, %s was granted for the site that banned it", l.Proxy.Name)
			}
			if err := next.api.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
				t.Fatalf("releasing a lease through the new leader: %v", err)
			}
		}
		g.start(l) // the container restarts, with its Raft directory
		g.voters(startTimeout)
	}
	cancel()
	wg.Wait()
	slices.Sort(firsts)
	t.Logf("first grant after each kill: %v (worst %v)", firsts, firsts[len(firsts)-1])
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the workload ran out of time")
	}
}
