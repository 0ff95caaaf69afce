package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
		if err := s.ReleaseAs("", l.ID, r.outcome, r.banDomain, Report{}); err != nil {
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

// TestReportsCountForTheLeasesPoolAndRule: reports on renewals and
// releases add up for the leased proxy's pool (bytes and ok requests) and
// for the rule of the lease's domain (ok requests), as part of the renewal
// or release: only when it succeeds and only for a live lease, within what
// the lease's life allows. Another identity's lease, a negative or
// oversized report, a report on an ended lease and a proxy in no pool
// count for no pool.
func TestReportsCountForTheLeasesPoolAndRule(t *testing.T) {
	inPool := func(pool string) proxyOption { return func(p *ProxyInfo) { p.Pool = pool } }
	s, _, _ := newTestStore(t, []ProxyInfo{
		newProxy("a", inPool("fast"), withMaxLeases(100), withLabels("name", "a")),
		newProxy("b", withMaxLeases(100), withLabels("name", "b")), // no pool
	})
	s.SetCrawlPolicy(policyOf(map[string]DomainLimits{"*.shop.example": {}}, nil))
	acquire := func(owner, proxy string) string {
		t.Helper()
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Owner: owner, Domain: "www.shop.example", Selector: mustSelector(t, "name="+proxy)})
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	a, b := acquire("alice", "a"), acquire("alice", "b")
	renew := func(owner, id string, r Report) error {
		_, err := s.RenewAs(owner, id, 0, r)
		return err
	}
	for _, r := range []struct {
		owner, id string
		report    Report
		wantErr   string
	}{
		{"alice", a, Report{TransferredBytes: 1000, OKRequests: 4}, ""},
		{"alice", a, Report{}, ""},
		{"alice", b, Report{TransferredBytes: 5000, OKRequests: 1}, ""}, // no pool: the rule only
		{"mallory", a, Report{TransferredBytes: 1 << 30, OKRequests: 9}, "unknown or expired lease"},
		{"alice", a, Report{TransferredBytes: -1}, "transferredBytes"},
		{"alice", a, Report{TransferredBytes: MaxTransferredReport + 1}, "transferredBytes"},
		{"alice", a, Report{OKRequests: MaxOKRequestsReport + 1}, "okRequests"},
		// Within one report's bounds, beyond what a second of life allows.
		{"alice", a, Report{OKRequests: MaxOKRequestsPerSecond * 2}, "at most 10000 a second"},
	} {
		err := renew(r.owner, r.id, r.report)
		if got := fmt.Sprint(err); (r.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(got, r.wantErr)) {
			t.Errorf("RenewAs(%s, %+v) = %v, want an error holding %q", r.owner, r.report, err, r.wantErr)
		}
	}
	if err := s.ReleaseAs("alice", a, OutcomeBanned, "", Report{TransferredBytes: 24}); err != nil { // the release's own report
		t.Fatal(err)
	}
	// Renewals of the released lease are refused, and their reports count nothing.
	for range 5 {
		if err := renew("alice", a, Report{TransferredBytes: 1 << 30, OKRequests: 1 << 20}); !errors.Is(err, ErrUnknownLease) {
			t.Errorf("renewing a released lease: %v, want ErrUnknownLease", err)
		}
	}
	if diff := cmp.Diff(Outcomes{OK: 4, Banned: 1, TransferredBytes: 1024}, s.PoolOutcomes(ObjectName{testNamespace, "fast"})); diff != "" {
		t.Errorf("pool fast (-want +got):\n%s", diff)
	}
	want := []RuleStats{{Host: "*.shop.example", InUse: 1, Outcomes: Outcomes{OK: 5, Banned: 1}}} // b is still held
	if diff := cmp.Diff(want, s.CrawlPolicyStats(ObjectName{testNamespace, "polite"})); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}
