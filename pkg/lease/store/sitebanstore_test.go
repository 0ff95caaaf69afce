package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// outcomeOfAcquire is what a store answered an acquire, for a table.
func outcomeOfAcquire(l Lease, err error) string {
	var siteBan *SiteBanningError
	switch {
	case err == nil:
		return "granted " + l.Proxy.Key.Name
	case errors.As(err, &siteBan):
		return fmt.Sprintf("site banning, retry after %v", siteBan.RetryAfter)
	case errors.Is(err, ErrCoolingDown):
		return "cooling down"
	default:
		return err.Error()
	}
}

// Issue 64: a site (any of its names) that bans every proxy it is sent
// gets the bound's worth of a namespace's proxies, then no lease until
// its oldest counted ban leaves the window; other sites and other
// namespaces are not affected; the refusals are counted.
func TestASiteThatBansEveryProxyIsRefusedAtTheBound(t *testing.T) {
	var fleet []ProxyInfo
	for i := range 8 {
		fleet = append(fleet, newProxy(fmt.Sprintf("p%d", i), withLatency(int64(i))), newProxy(fmt.Sprintf("o%d", i), inNamespace("other")))
	}
	s, clk, m := newTestStore(t, fleet, withStoreConfig(func(c *Config) { c.SiteBanProxies, c.SiteBanWindow = 3, 5*time.Minute }))
	var got []string
	for i := range 5 {
		domain := []string{"a.hostile.example", "b.hostile.example", "hostile.example"}[i%3]
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "crawler", Namespace: testNamespace, Domain: domain})
		got = append(got, outcomeOfAcquire(l, err))
		if err == nil {
			if err := s.Release(l.ID, OutcomeBanned, ""); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
		}
	}
	want := []string{"granted p0", "granted p1", "granted p2", "site banning, retry after 2m0s", "site banning, retry after 2m0s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a site banning every proxy (-want +got):\n%s", diff)
	}
	if n := m.snapshot().acquires[AcquireSiteBanning]; n != 2 {
		t.Errorf("%d acquires counted site_banning, want 2", n)
	}
	for _, req := range []AcquireRequest{
		{Holder: "crawler", Namespace: testNamespace, Domain: "calm.example"},
		{Holder: "crawler", Namespace: "other", Domain: "hostile.example"},
	} {
		l, err := s.Acquire(context.Background(), req)
		if err != nil {
			t.Errorf("%s in %s: %v, want a grant", req.Domain, req.Namespace, err)
			continue
		}
		release(t, s, l)
	}
	blocks, err := s.SiteBlocks()
	if err != nil {
		t.Fatal(err)
	}
	wantBlocks := []SiteBlock{{Namespace: testNamespace, Site: "hostile.example", Domain: "hostile.example", Tier: -1, Proxies: 3, Window: 5 * time.Minute, Until: t0.Add(5 * time.Minute)}}
	if diff := cmp.Diff(wantBlocks, blocks); diff != "" {
		t.Errorf("SiteBlocks (-want +got):\n%s", diff)
	}
	// Once the first ban has left the window, one proxy more: p4, never
	// leased (p3 served calm.example).
	clk.Step(2 * time.Minute)
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "crawler", Namespace: testNamespace, Domain: "b.hostile.example"})
	if got := outcomeOfAcquire(l, err); got != "granted p4" {
		t.Errorf("after the window: %s, want granted p4", got)
	}
}

// With tiers, a site blocked on a tier has its budget moved to the next
// one, where it may ban the bound's worth again; on the last tier it is
// refused. The CrawlPolicy governing it is named in the blocks.
func TestASiteBlockedOnATierEscalates(t *testing.T) {
	s, _, _ := newTestStore(t, tieredFleet(testNamespace, 4), withStoreConfig(func(c *Config) { c.SiteBanProxies = 2 }))
	s.SetCrawlPolicy(CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Default: &DomainLimits{},
		Tiers: map[string]*Tiering{DefaultRuleHost: twoTiers(tier.Config{MinOutcomes: 100})}}) // bans alone never escalate
	var got []string
	for range 6 {
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "crawler", Namespace: testNamespace, Domain: "hostile.example"})
		out := outcomeOfAcquire(l, err)
		if err == nil {
			out = "granted on " + l.Proxy.Pool
			if err := s.Release(l.ID, OutcomeBanned, ""); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, out)
	}
	want := []string{"granted on own-vms", "granted on own-vms", "granted on residential", "granted on residential",
		"site banning, retry after 10m0s", "site banning, retry after 10m0s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a site banning every proxy of two tiers (-want +got):\n%s", diff)
	}
	blocks, err := s.SiteBlocks()
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, b := range blocks {
		named = append(named, fmt.Sprintf("%s %s tier %s: %d proxies", b.Policy, b.Site, b.TierName, b.Proxies))
	}
	if diff := cmp.Diff([]string{"polite hostile.example tier own-vms: 2 proxies", "polite hostile.example tier residential: 2 proxies"}, named); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
}
