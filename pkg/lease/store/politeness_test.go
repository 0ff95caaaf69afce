package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func policyOf(rules map[string]DomainLimits, def *DomainLimits) CrawlPolicy {
	return CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Rules: rules, Default: def}
}

// grantsFor acquires for domain n times without waiting and says which
// were granted (true) or refused for the budget (false).
func grantsFor(t *testing.T, s *Store, domain string, n int) []bool {
	t.Helper()
	var out []bool
	for i := range n {
		_, err := s.Acquire(context.Background(), AcquireRequest{Holder: fmt.Sprintf("h-%s-%d", domain, i), Domain: domain})
		switch {
		case err == nil:
			out = append(out, true)
		case errors.Is(err, ErrDomainLimited):
			out = append(out, false)
		default:
			t.Fatalf("acquire %d for %s: %v", i, domain, err)
		}
	}
	return out
}

func TestCrawlPolicyBudgets(t *testing.T) {
	three := DomainLimits{MaxConcurrent: 3}
	tests := map[string]struct {
		policy CrawlPolicy
		domain string
		want   []bool
	}{
		"exact host, three at once":        {policyOf(map[string]DomainLimits{"shop.example": three}, nil), "shop.example", []bool{true, true, true, false, false}},
		"other host unaffected":            {policyOf(map[string]DomainLimits{"shop.example": three}, nil), "news.example", []bool{true, true, true, true, true}},
		"suffix binds the apex":            {policyOf(map[string]DomainLimits{"*.example.com": three}, nil), "example.com", []bool{true, true, true, false}},
		"suffix binds a subdomain":         {policyOf(map[string]DomainLimits{"*.example.com": three}, nil), "a.b.example.com", []bool{true, true, true, false}},
		"suffix does not bind a lookalike": {policyOf(map[string]DomainLimits{"*.example.com": three}, nil), "badexample.com", []bool{true, true, true, true}},
		"exact beats suffix":               {policyOf(map[string]DomainLimits{"*.example.com": three, "api.example.com": {MaxConcurrent: 1}}, nil), "api.example.com", []bool{true, false}},
		"default binds the rest":           {policyOf(map[string]DomainLimits{"shop.example": three}, &DomainLimits{MaxConcurrent: 2}), "news.example", []bool{true, true, false}},
		"minInterval: one grant a window":  {policyOf(map[string]DomainLimits{"shop.example": {MinInterval: 200 * time.Millisecond}}, nil), "shop.example", []bool{true, false, false}},
		"per proxy: each proxy once":       {policyOf(map[string]DomainLimits{"shop.example": {MinIntervalPerProxy: time.Minute}}, nil), "shop.example", []bool{true, true, true, true, true, true, false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var proxies []ProxyInfo
			for i := range 6 {
				proxies = append(proxies, newProxy(fmt.Sprintf("p%d", i), withMaxLeases(4)))
			}
			s, _, _ := newTestStore(t, proxies)
			s.SetCrawlPolicy(tc.policy)
			if diff := cmp.Diff(tc.want, grantsFor(t, s, tc.domain, len(tc.want))); diff != "" {
				t.Errorf("grants (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCrawlPolicyReleaseAndIntervalFree: a release frees a concurrency
// slot at once; an interval frees the budget when it ends, and the 429's
// Retry-After says when; a waiting acquire is granted then.
func TestCrawlPolicyReleaseAndIntervalFree(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(10)), newProxy("b", withMaxLeases(10))})
	s.SetCrawlPolicy(policyOf(map[string]DomainLimits{"shop.example": {MaxConcurrent: 1, MinInterval: 300 * time.Millisecond}}, nil))
	ctx := context.Background()
	first, err := s.Acquire(ctx, AcquireRequest{Holder: "one", Domain: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseAs("", first.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, AcquireRequest{Holder: "two", Domain: "shop.example"})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, ErrDomainLimited) || unavailable.RetryAfter != 300*time.Millisecond {
		t.Fatalf("second acquire inside the interval: %v; want ErrDomainLimited retry after 300ms", err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, AcquireRequest{Holder: "waiter", Domain: "shop.example", Wait: 5 * time.Second})
		granted <- err
	}()
	waitForTimer(t, clk)
	clk.Step(300 * time.Millisecond)
	if err := <-granted; err != nil {
		t.Fatalf("the waiting acquire: %v", err)
	}
	stats := s.CrawlPolicyStats(ObjectName{testNamespace, "polite"})
	if diff := cmp.Diff([]RuleStats{{Host: "shop.example", InUse: 1, Waited: 1, Refused: 1, Outcomes: Outcomes{OK: 1}}}, stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// TestCrawlPolicyChangeRecounts: a policy applied while leases are live
// charges them; deleting it frees the domain.
func TestCrawlPolicyChangeRecounts(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(10))})
	if got := grantsFor(t, s, "shop.example", 2); !cmp.Equal(got, []bool{true, true}) {
		t.Fatalf("grants before the policy: %v", got)
	}
	s.SetCrawlPolicy(policyOf(map[string]DomainLimits{"shop.example": {MaxConcurrent: 2}}, nil))
	if got := grantsFor(t, s, "shop.example", 1); !cmp.Equal(got, []bool{false}) {
		t.Errorf("with two live leases and maxConcurrent 2: %v, want refused", got)
	}
	s.DeleteCrawlPolicy(ObjectName{testNamespace, "polite"})
	if got := grantsFor(t, s, "shop.example", 1); !cmp.Equal(got, []bool{true}) {
		t.Errorf("after the policy went: %v, want granted", got)
	}
}

// TestDefaultRuleBudgetsAreBounded: one budget per domain under the
// default rule, the idle ones evicted beyond the cap.
func TestDefaultRuleBudgetsAreBounded(t *testing.T) {
	s, _, m := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(100))}, withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 10 }))
	s.SetCrawlPolicy(policyOf(nil, &DomainLimits{MaxConcurrent: 5}))
	for i := range 50 {
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Domain: fmt.Sprintf("d%d.example", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseAs("", l.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.st.budgets.domainTotal; n != 10 {
		t.Errorf("%d default-rule budgets kept, want the cap 10", n)
	}
	if got := m.Snapshot().Evictions[StateDomainBudgets]; got != 40 {
		t.Errorf("%d evictions counted, want 40", got)
	}
}
