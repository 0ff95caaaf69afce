package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule/site"
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
			if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
		}
	}
	want := []string{"granted p0", "granted p1", "granted p2", "site banning, retry after 2m0s", "site banning, retry after 2m0s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a site banning every proxy (-want +got):\n%s", diff)
	}
	if n := m.Snapshot().Acquires[AcquireSiteBanning]; n != 2 {
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
			if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
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

// The site bans are state like the rest
// (docs/decisions/0370-lease-store-components-and-effects.md): a replica
// that applied the leader's effects, and one restored from its snapshot,
// refuse the site once promoted, until the same time (moved on by the
// promotion's skew), and grant on another site.
func TestSiteBansReachAReplicaAndASnapshot(t *testing.T) {
	log := &effectLog{counts: map[Kind]int{}}
	var fleet []ProxyInfo
	for i := range 4 {
		fleet = append(fleet, newProxy(fmt.Sprintf("p%d", i)))
	}
	bound := func(c *Config) { c.SiteBanProxies, c.SiteBanWindow = 2, 5*time.Minute }
	s, clk, _ := newTestStore(t, fleet, withStoreConfig(func(c *Config) { bound(c); c.Journal = log }))
	for range 2 {
		l := acquire(t, s, AcquireRequest{Namespace: testNamespace, Domain: "www.hostile.example"})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if err := s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	follower := func() *Store {
		cfg := Config{Clock: clk, Key: testKey, Follower: true, Site: site.Of}
		bound(&cfg)
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	replica := follower()
	for _, raw := range log.encoded {
		e, err := DecodeEffect(raw)
		if err != nil {
			t.Fatal(err)
		}
		replica.Apply(e)
	}
	restored := follower()
	if err := restored.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	for name, f := range map[string]*Store{"replica": replica, "restored": restored} {
		if err := f.Promote(10 * time.Second); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, domain := range []string{"hostile.example", "calm.example"} {
			l, err := f.Acquire(context.Background(), AcquireRequest{Holder: "w", Namespace: testNamespace, Domain: domain})
			got = append(got, outcomeOfAcquire(l, err))
		}
		want := []string{"site banning, retry after 4m10s", "granted p2"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
