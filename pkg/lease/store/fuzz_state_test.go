package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// A fuzz target for crawl policy budgets (issue 48): whatever the calls,
// the default rule's budgets stay within their shares with every live
// lease charged to a budget the store still has, and its tier states
// (issue 53) within the same shares, each listed once. (Session state puts:
// pkg/lease/server's FuzzSessionStatePut.)
// hack/fuzz.sh (make fuzz) runs every Fuzz function it finds. Run one:
//
//	go test -run '^$' -fuzz '^FuzzDomainBudgets$' -fuzztime 10s ./pkg/lease/store

// FuzzDomainBudgets drives acquires (in two namespaces, for a few domains
// or the fuzzed one), releases and clock steps against default rules with
// intervals and a cap of 4 budgets (a share of 2 each), checking the
// budgets' bookkeeping after every step.
func FuzzDomainBudgets(f *testing.F) {
	f.Add([]byte{0, 4, 8, 12, 1, 5, 9, 2, 2, 3 | 20<<2, 0, 4}, "shop.example")
	f.Add([]byte{0, 0, 0, 1, 1, 1, 2, 2, 2, 3 | 63<<2, 0, 1}, "")
	f.Add([]byte{1, 5, 9, 13, 17, 21, 3 | 6<<2, 1, 5}, "*.example.com")
	f.Add([]byte{0, 4, 2, 2, 0, 4, 3, 0, 4}, "a.example.com")
	f.Fuzz(func(t *testing.T, ops []byte, fuzzed string) {
		if len(ops) > 200 {
			ops = ops[:200]
		}
		proxies := []ProxyInfo{
			newProxy("a1", inNamespace("ns-a"), withMaxLeases(3), inTierPool("own-vms")), newProxy("a2", inNamespace("ns-a"), withMaxLeases(3), inTierPool("residential")),
			newProxy("b1", inNamespace("ns-b"), withMaxLeases(3)),
		}
		s, clk, _ := newTestStore(t, proxies, withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 4 }))
		s.SetCrawlPolicy(CrawlPolicy{Key: ObjectName{"ns-a", "p"}, Default: &DomainLimits{MaxConcurrent: 2, MinInterval: 3 * time.Second},
			Tiers: map[string]*Tiering{DefaultRuleHost: twoTiers(tier.Config{MinOutcomes: 1, QuietPeriod: 5 * time.Second})}})
		s.SetCrawlPolicy(CrawlPolicy{Key: ObjectName{"ns-b", "p"}, Rules: map[string]DomainLimits{"*.example.com": {MaxConcurrent: 1}},
			Default: &DomainLimits{MinIntervalPerProxy: 5 * time.Second}})
		domains := []string{"a.example", "b.example", "c.example", "d.example", "a.example.com", "x.y.example.com", "", fuzzed}
		var held []Lease
		for _, op := range ops {
			arg := int(op >> 2)
			switch op % 4 {
			case 0, 1:
				ns := []string{"ns-a", "ns-b"}[op%2]
				// Whatever the domain: the API's decoder refuses some, but an
				// in-process caller reaches the store with any.
				domain := hostrule.NormalizeDomain(domains[arg%len(domains)])
				l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Namespace: ns, Domain: domain})
				var unavailable *UnavailableError
				switch {
				case err == nil:
					held = append(held, l)
				case !errors.As(err, &unavailable):
					t.Fatalf("acquire %q in %s: %v", domain, ns, err)
				}
			case 2:
				if len(held) > 0 {
					// It may have expired meanwhile. Odd arguments ban: the
					// tier states of ns-a's default rule move.
					outcome := OutcomeOK
					if arg%2 == 1 && held[0].Domain != "" {
						outcome = OutcomeBanned
					}
					if err := s.ReleaseAs("", held[0].ID, outcome, "", Report{}); err != nil && !errors.Is(err, ErrUnknownLease) {
						t.Fatal(err)
					}
					held = held[1:]
				}
			case 3:
				clk.Step(time.Duration(arg) * time.Second)
			}
			checkBudgets(t, s)
		}
	})
}

// checkBudgets fails unless the politeness bookkeeping agrees with itself:
// counts and shares, the idle heaps, and every live lease charged to a
// budget the store keeps.
func checkBudgets(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var problems []string
	counted, inUse := map[string]int{}, map[*budget]int{}
	for k, b := range s.st.budgets.budgets {
		if k.domain == "" {
			continue
		}
		counted[k.namespace]++
		nd := s.st.budgets.domains[k.namespace]
		switch {
		case nd == nil:
			problems = append(problems, fmt.Sprintf("%+v: its namespace is not counted", k))
		case (b.idleAt >= 0) != (b.inUse == 0):
			problems = append(problems, fmt.Sprintf("%+v: idle at %d with %d in use", k, b.idleAt, b.inUse))
		case b.idleAt >= 0 && (b.idleAt >= len(nd.idle) || nd.idle[b.idleAt] != b):
			problems = append(problems, fmt.Sprintf("%+v: not at its place %d in the idle heap", k, b.idleAt))
		}
	}
	total := 0
	for ns, nd := range s.st.budgets.domains {
		total += nd.count
		if nd.count != counted[ns] || nd.count > s.st.rules.share() {
			problems = append(problems, fmt.Sprintf("%s: counted %d, kept %d, share %d", ns, nd.count, counted[ns], s.st.rules.share()))
		}
	}
	if total != s.st.budgets.domainTotal || total > s.st.rules.maxDomains {
		problems = append(problems, fmt.Sprintf("total %d, counted %d, cap %d", s.st.budgets.domainTotal, total, s.st.rules.maxDomains))
	}
	for _, l := range s.st.leases {
		if l.state != stateLive || l.budget == nil {
			continue
		}
		inUse[l.budget]++
		if s.st.budgets.budgets[l.budget.key] != l.budget {
			problems = append(problems, fmt.Sprintf("a live lease for %q is charged to a budget the store dropped", l.domain))
		}
	}
	for b, n := range inUse {
		if b.inUse != n {
			problems = append(problems, fmt.Sprintf("%+v: %d in use, %d live leases", b.key, b.inUse, n))
		}
	}
	if err := s.st.checkTiers(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}
