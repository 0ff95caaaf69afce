package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// Issue 48, item 3: the default rule's per-domain budgets never run
// unbounded, and one namespace's cannot crowd out another's.

// tryDomain acquires for domain in ns without waiting and releases what
// it got: "granted", "limited" (the budget binds), "full" (no room for a
// budget), with the Retry-After of a refusal.
func tryDomain(t *testing.T, s *Store, ns, domain string) (string, time.Duration) {
	t.Helper()
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Namespace: ns, Domain: domain})
	var unavailable *UnavailableError
	switch {
	case err == nil:
		if err := s.ReleaseAs("", l.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
		return "granted", 0
	case errors.Is(err, ErrDomainBudgetsFull) && errors.As(err, &unavailable):
		return "full", unavailable.RetryAfter
	case errors.Is(err, ErrDomainLimited) && errors.As(err, &unavailable):
		return "limited", unavailable.RetryAfter
	}
	t.Fatalf("acquire %s in %s: %v", domain, ns, err)
	return "", 0
}

func defaultPolicy(ns string, limits DomainLimits) CrawlPolicy {
	return CrawlPolicy{Key: ObjectName{ns, "polite"}, Default: &limits}
}

// TestDefaultBudgetIsNeverGrantedUnbound: with every budget of the cap
// pinned by its interval, a new domain is refused with when to come back,
// not granted with a budget evicted at once (whose limits would then
// never bind); once an interval ends its budget makes room.
func TestDefaultBudgetIsNeverGrantedUnbound(t *testing.T) {
	s, clk, m := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(10)), newProxy("b", withMaxLeases(10))},
		withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 2 }))
	s.SetCrawlPolicy(defaultPolicy(testNamespace, DomainLimits{MinIntervalPerProxy: time.Hour}))
	for _, d := range []string{"a.example", "b.example"} {
		if got, _ := tryDomain(t, s, "", d); got != "granted" {
			t.Fatalf("%s: %s, want granted", d, got)
		}
	}
	type answer struct {
		Result     string
		RetryAfter time.Duration
	}
	try := func(d string) answer { r, after := tryDomain(t, s, "", d); return answer{r, after} }
	if diff := cmp.Diff(answer{"full", time.Hour}, try("c.example")); diff != "" {
		t.Errorf("a third domain with two pinned budgets (-want +got):\n%s", diff)
	}
	clk.Step(time.Hour) // a.example's and b.example's per-proxy intervals end
	// c is granted on one proxy, then on the other; a third grant would be
	// inside its per-proxy interval on both: its own budget binds.
	for i, want := range []answer{{"granted", 0}, {"granted", 0}, {"limited", time.Hour}} {
		if diff := cmp.Diff(want, try("c.example")); diff != "" {
			t.Errorf("c.example, grant %d after the intervals ended (-want +got):\n%s", i+1, diff)
		}
	}
	if got := m.Snapshot().Evictions[StateDomainBudgets]; got != 1 {
		t.Errorf("%d budgets evicted, want 1 (one idle one made room for c)", got)
	}
}

// TestDefaultBudgetsAreSharedPerNamespace: a tenant that leases junk
// domains under a long interval fills its own share of the cap; another
// namespace still gets budgets of its own, and their limits bind.
func TestDefaultBudgetsAreSharedPerNamespace(t *testing.T) {
	proxies := []ProxyInfo{
		newProxy("a", inNamespace("tenant-a"), withMaxLeases(100)),
		newProxy("b", inNamespace("tenant-b"), withMaxLeases(100)),
	}
	s, _, _ := newTestStore(t, proxies, withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 4 }))
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		s.SetCrawlPolicy(defaultPolicy(ns, DomainLimits{MinInterval: time.Hour}))
	}
	results := map[string]int{}
	for i := range 100 {
		r, _ := tryDomain(t, s, "tenant-a", fmt.Sprintf("junk-%d.example", i))
		results[r]++
	}
	if diff := cmp.Diff(map[string]int{"granted": 2, "full": 98}, results); diff != "" {
		t.Errorf("tenant-a's 100 junk domains with a share of 2 (-want +got):\n%s", diff)
	}
	var got []string
	for _, d := range []string{"shop.example", "shop.example", "news.example", "third.example"} {
		r, _ := tryDomain(t, s, "tenant-b", d)
		got = append(got, d+": "+r)
	}
	want := []string{"shop.example: granted", "shop.example: limited", "news.example: granted", "third.example: full"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tenant-b after tenant-a's junk (-want +got):\n%s", diff)
	}
}

// TestDefaultBudgetsReshareWhenANamespaceJoins: a namespace whose share
// shrank gives back its idle budgets at once and makes no new one until
// it is under its share.
func TestDefaultBudgetsReshareWhenANamespaceJoins(t *testing.T) {
	proxies := []ProxyInfo{
		newProxy("a", inNamespace("tenant-a"), withMaxLeases(100)),
		newProxy("b", inNamespace("tenant-b"), withMaxLeases(100)),
	}
	s, _, m := newTestStore(t, proxies, withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 4 }))
	s.SetCrawlPolicy(defaultPolicy("tenant-a", DomainLimits{MaxConcurrent: 1}))
	var held []Lease
	for i := range 4 { // a share of 4: two held (pinned), two idle
		l := acquire(t, s, AcquireRequest{Namespace: "tenant-a", Domain: fmt.Sprintf("d%d.example", i)})
		if i < 2 {
			held = append(held, l)
		} else {
			release(t, s, l)
		}
	}
	s.SetCrawlPolicy(defaultPolicy("tenant-b", DomainLimits{MaxConcurrent: 1}))
	if got := m.Snapshot().Entries[StateDomainBudgets]; got != 2 {
		t.Errorf("%d budgets after tenant-b joined, want tenant-a's 2 held ones", got)
	}
	if r, _ := tryDomain(t, s, "tenant-a", "new.example"); r != "full" {
		t.Errorf("tenant-a at its new share with both pinned: %s, want full", r)
	}
	release(t, s, held[0])
	if r, _ := tryDomain(t, s, "tenant-a", "new.example"); r != "granted" {
		t.Errorf("tenant-a after a release: %s, want granted", r)
	}
}

// TestAbdicateForgetsBudgetCharges: the leases a term forgets stop
// counting against their budgets; a relearned one counts once.
func TestAbdicateForgetsBudgetCharges(t *testing.T) {
	newStore := func(t *testing.T) (*Store, *clocktesting.FakeClock, Lease) {
		s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(10))})
		s.SetCrawlPolicy(defaultPolicy(testNamespace, DomainLimits{MaxConcurrent: 1}))
		held := acquire(t, s, AcquireRequest{Domain: "shop.example"})
		s.Abdicate()
		return s, clk, held
	}
	t.Run("forgotten", func(t *testing.T) {
		s, _, _ := newStore(t)
		s.Lead(time.Time{}, time.Time{})
		if got, _ := tryDomain(t, s, "", "shop.example"); got != "granted" {
			t.Errorf("after the term that held it ended: %s, want granted", got)
		}
		checkBudgets(t, s)
	})
	t.Run("relearned", func(t *testing.T) {
		s, clk, held := newStore(t)
		s.Lead(clk.Now().Add(10*time.Second), time.Time{})
		held, err := s.RenewAs("", held.ID, 0, Report{}) // relearned while recovering: charged again
		if err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second) // the recovery ends
		if got, _ := tryDomain(t, s, "", "shop.example"); got != "limited" {
			t.Errorf("with the relearned lease live: %s, want limited", got)
		}
		release(t, s, held)
		if got, _ := tryDomain(t, s, "", "shop.example"); got != "granted" {
			t.Errorf("after its release: %s, want granted (it counted once)", got)
		}
		checkBudgets(t, s)
	})
}
