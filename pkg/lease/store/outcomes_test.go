package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOutcomesCountPerPoolAndRule: every release counts once, for the
// leased proxy's pool and for the rule its domain matches; a proxy outside
// any pool and a domain no rule matches are counted nowhere.
func TestOutcomesCountPerPoolAndRule(t *testing.T) {
	inPool := func(pool string) proxyOption { return func(p *ProxyInfo) { p.Pool = pool } }
	s, _, _ := newTestStore(t, []ProxyInfo{
		newProxy("a", inPool("fast"), withMaxLeases(100), withLabels("name", "a")),
		newProxy("b", withMaxLeases(100), withLabels("name", "b")), // no pool
	})
	s.SetCrawlPolicy(policyOf(map[string]DomainLimits{"*.shop.example": {}}, &DomainLimits{}))
	releases := []struct {
		proxy, domain string
		outcome       Outcome
		banDomain     string
	}{
		{"a", "www.shop.example", OutcomeOK, ""},
		{"a", "www.shop.example", OutcomeOK, ""},
		{"a", "WWW.Shop.Example.", OutcomeBanned, ""},
		{"a", "", OutcomeBanned, "news.example"}, // the release names the domain
		{"a", "blog.example", OutcomeError, ""},
		{"a", "", OutcomeOK, ""}, // no domain: the pool only
		{"b", "www.shop.example", OutcomeOK, ""},
	}
	for i, r := range releases {
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: fmt.Sprintf("h%d", i), Domain: r.domain, Selector: mustSelector(t, "name="+r.proxy)})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if err := s.Release(l.ID, r.outcome, r.banDomain); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if diff := cmp.Diff(Outcomes{OK: 3, Banned: 2, Error: 1}, s.PoolOutcomes(ObjectName{testNamespace, "fast"})); diff != "" {
		t.Errorf("pool fast (-want +got):\n%s", diff)
	}
	want := []RuleStats{
		{Host: "*.shop.example", Outcomes: Outcomes{OK: 3, Banned: 1}},
		{Host: DefaultRuleHost, Outcomes: Outcomes{Banned: 1, Error: 1}},
	}
	if diff := cmp.Diff(want, s.CrawlPolicyStats(ObjectName{testNamespace, "polite"})); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	s.ForgetPool(ObjectName{testNamespace, "fast"})
	if got := s.PoolOutcomes(ObjectName{testNamespace, "fast"}); got != (Outcomes{}) {
		t.Errorf("a forgotten pool still counts %+v", got)
	}
}
