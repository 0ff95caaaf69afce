package store

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

const poolLabel = "crawl.proxyfleet.io/pool" // what pkg/pool labels its members with

// inTierPool is a proxy of a pool, labelled as pool members are.
func inTierPool(pool string) proxyOption {
	return func(p *ProxyInfo) {
		p.Pool = pool
		p.Labels = map[string]string{poolLabel: pool}
	}
}

// twoTiers is own VMs first, then a proxy network's residential IPs.
func twoTiers(cfg tier.Config) *Tiering {
	return &Tiering{Names: []string{"own-vms", "residential"},
		Selectors: []labels.Selector{labels.SelectorFromSet(labels.Set{poolLabel: "own-vms"}), labels.SelectorFromSet(labels.Set{poolLabel: "residential"})},
		Config:    cfg.WithDefaults()}
}

// tieredFleet is n own VMs and n residential sessions in ns, each taking
// many leases.
func tieredFleet(ns string, n int) []ProxyInfo {
	var out []ProxyInfo
	for i := range n {
		out = append(out, newProxy(fmt.Sprintf("vm-%d", i), inNamespace(ns), inTierPool("own-vms"), withMaxLeases(100)),
			newProxy(fmt.Sprintf("res-%d", i), inNamespace(ns), inTierPool("residential"), withMaxLeases(100)))
	}
	return out
}

func tieredDefault(ns string) CrawlPolicy {
	return CrawlPolicy{Key: ObjectName{ns, "polite"}, Default: &DomainLimits{},
		Tiers: map[string]*Tiering{DefaultRuleHost: twoTiers(tier.Config{})}}
}

// TestTiersEscalateOnlyWhereBanned is issue 53's site: bans.example bans
// every own VM at once and never a residential IP, for its first 20
// minutes; calm.example never bans. One acquire for each per second,
// released with the site's verdict. bans.example must be on the
// residential tier within one window of its first ban (but for its
// probes' share), calm.example on own VMs throughout, and bans.example
// back on own VMs within the quiet period plus a window of its last ban.
func TestTiersEscalateOnlyWhereBanned(t *testing.T) {
	const (
		banning = 20 * time.Minute
		run     = 40 * time.Minute
		bucket  = 2 * time.Minute
	)
	cfg := tier.Config{}.WithDefaults()
	m := &tierTestMetrics{Metrics: storetest.NewMetrics(), grants: map[string]int64{}}
	s, clk, _ := newTestStore(t, tieredFleet(testNamespace, 20), withStoreConfig(func(c *Config) { c.Metrics = m }))
	s.SetCrawlPolicy(tieredDefault(testNamespace))

	type grant struct {
		at         time.Duration
		site, pool string
	}
	var grants []grant
	for at := time.Duration(0); at < run; at += time.Second {
		for _, site := range []string{"bans.example", "calm.example"} {
			l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "crawler", Namespace: testNamespace, Domain: site})
			if err != nil {
				t.Fatalf("at %v, acquire for %s: %v", at, site, err)
			}
			grants = append(grants, grant{at: at, site: site, pool: l.Proxy.Pool})
			outcome := OutcomeOK
			if site == "bans.example" && at < banning && l.Proxy.Pool == "own-vms" {
				outcome = OutcomeBanned
			}
			if err := s.ReleaseAs("", l.ID, outcome, "", Report{}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Step(time.Second)
	}

	// Grants per tier over time, for the record (docs/tiers.md quotes it).
	perBucket := map[string]map[time.Duration][2]int{"bans.example": {}, "calm.example": {}}
	for _, g := range grants {
		c := perBucket[g.site][g.at.Truncate(bucket)]
		if g.pool == "own-vms" {
			c[0]++
		} else {
			c[1]++
		}
		perBucket[g.site][g.at.Truncate(bucket)] = c
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s %-26s %-26s\n", "minute", "bans.example own/resid.", "calm.example own/resid.")
	for b := time.Duration(0); b < run; b += bucket {
		fmt.Fprintf(&table, "%-8v %4d / %-19d %4d / %-19d\n", b.Minutes(), perBucket["bans.example"][b][0], perBucket["bans.example"][b][1],
			perBucket["calm.example"][b][0], perBucket["calm.example"][b][1])
	}
	t.Logf("grants per tier, per %v of fake time (bans.example bans own VMs until minute %v):\n%s", bucket, banning.Minutes(), table.String())

	var firstBan, escalated, stepDown time.Duration = -1, -1, -1
	for _, g := range grants {
		if g.site == "calm.example" && g.pool != "own-vms" {
			t.Errorf("at %v calm.example was granted on %s, want own-vms throughout", g.at, g.pool)
		}
		if g.site != "bans.example" {
			continue
		}
		if firstBan < 0 && g.pool == "own-vms" {
			firstBan = g.at
		}
		if escalated < 0 && g.pool == "residential" {
			escalated = g.at
		}
		if g.at >= banning && g.pool == "residential" {
			stepDown = -1
		} else if g.at >= banning && stepDown < 0 {
			stepDown = g.at
		}
	}
	// While it bans: after one window, own VMs only as probes, at most
	// their share (and one for the probe's start) in each window.
	for from := firstBan + cfg.Window; from+cfg.Window <= banning; from += cfg.Window {
		own, all := 0, 0
		for _, g := range grants {
			if g.site == "bans.example" && g.at >= from && g.at < from+cfg.Window {
				all++
				if g.pool == "own-vms" {
					own++
				}
			}
		}
		if limit := int(cfg.ProbeShare*float64(all)) + 1; own > limit {
			t.Errorf("bans.example in [%v, %v): %d of %d grants on own VMs, want at most %d (probes)", from, from+cfg.Window, own, all, limit)
		}
	}
	if stepDown < 0 || stepDown > banning+cfg.QuietPeriod+cfg.Window {
		t.Errorf("bans.example stopped banning at %v; back on own VMs for good from %v, want by %v", banning, stepDown, banning+cfg.QuietPeriod+cfg.Window)
	}
	if escalated < 0 || escalated > firstBan+cfg.Window {
		t.Errorf("bans.example first banned at %v, first on residential at %v, want within a window (%v)", firstBan, escalated, cfg.Window)
	}
	t.Logf("bans.example: first ban at %v, on residential from %v; stopped banning at %v, back on own VMs for good at %v", firstBan, escalated, banning, stepDown)

	stats := s.CrawlPolicyStats(ObjectName{testNamespace, "polite"})
	if len(stats) != 1 || len(stats[0].BusiestDomains) != 2 {
		t.Fatalf("stats: %+v, want the default rule with two busiest domains", stats)
	}
	wantTiers := []string{"own-vms", "own-vms"}
	gotTiers := []string{stats[0].BusiestDomains[0].Tier, stats[0].BusiestDomains[1].Tier}
	if diff := cmp.Diff(wantTiers, gotTiers); diff != "" {
		t.Errorf("busiest domains' tiers at the end (-want +got):\n%s", diff)
	}
	var sum int64
	fromStats := map[string]int64{}
	for i, ts := range stats[0].Tiers {
		sum += ts.Grants
		fromStats[fmt.Sprint(i)] = ts.Grants
	}
	if err := s.checkConsistency(); err != nil {
		t.Error(err)
	}
	if sum != int64(len(grants)) {
		t.Errorf("tier grants sum to %d, want every grant (%d)", sum, len(grants))
	}
	if diff := cmp.Diff(fromStats, m.tierGrants()); diff != "" {
		t.Errorf("grants per tier: metrics differ from stats (-stats +metrics):\n%s", diff)
	}
}

// escalate bans domain in ns on own VMs until its grants go to the
// residential tier.
func escalate(t *testing.T, s *Store, ns, domain string) {
	t.Helper()
	for range tier.DefaultMinOutcomes {
		l := acquire(t, s, AcquireRequest{Namespace: ns, Domain: domain})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
			t.Fatal(err)
		}
	}
	if l := acquire(t, s, AcquireRequest{Namespace: ns, Domain: domain}); l.Proxy.Pool != "residential" {
		t.Fatalf("after %d bans %s is granted on %s, want residential", tier.DefaultMinOutcomes, domain, l.Proxy.Pool)
	} else {
		release(t, s, l)
	}
}

// TestAcquireNamingASelectorIsNotTiered: the caller's own selector (a
// pool, here) wins over the domain's tier; a tiered acquire stays within
// the namespace it asks for.
func TestAcquireNamingASelectorIsNotTiered(t *testing.T) {
	// escalate's five bans would also block the site on own-vms, for the
	// own selector too (sitebans.go): a bound above them keeps this test
	// to the tiers.
	s, _, _ := newTestStore(t, append(tieredFleet(testNamespace, 10), tieredFleet("other", 2)...),
		withStoreConfig(func(c *Config) { c.SiteBanProxies = MaxSiteBanProxies }))
	s.SetCrawlPolicy(tieredDefault(testNamespace))
	escalate(t, s, testNamespace, "bans.example")
	tests := map[string]struct {
		req      AcquireRequest
		wantPool string
		wantNS   string
	}{
		"tiered":           {req: AcquireRequest{Namespace: testNamespace, Domain: "bans.example"}, wantPool: "residential", wantNS: testNamespace},
		"own selector":     {req: AcquireRequest{Namespace: testNamespace, Domain: "bans.example", Selector: labels.SelectorFromSet(labels.Set{poolLabel: "own-vms"})}, wantPool: "own-vms", wantNS: testNamespace},
		"no policy there":  {req: AcquireRequest{Namespace: "other", Domain: "bans.example"}, wantNS: "other"},
		"another domain":   {req: AcquireRequest{Namespace: testNamespace, Domain: "calm.example"}, wantPool: "own-vms", wantNS: testNamespace},
		"no domain at all": {req: AcquireRequest{Namespace: testNamespace}, wantNS: testNamespace},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := acquire(t, s, tc.req)
			defer release(t, s, l)
			if tc.wantPool != "" && l.Proxy.Pool != tc.wantPool || l.Proxy.Key.Namespace != tc.wantNS {
				t.Errorf("granted %s of pool %q, want namespace %s, pool %q", l.Proxy.Key, l.Proxy.Pool, tc.wantNS, tc.wantPool)
			}
		})
	}
}

// TestTierStateCapEvictsOnlyWithinTheNamespace: a namespace leasing
// thousands of new domains keeps at most its share of tier states (the
// budgets' share of MaxDomainBudgets), evicting its own least recently
// used; another namespace's escalated domain keeps its tier.
func TestTierStateCapEvictsOnlyWithinTheNamespace(t *testing.T) {
	s, _, m := newTestStore(t, append(tieredFleet("victim", 10), tieredFleet("flood", 10)...), withStoreConfig(func(c *Config) { c.MaxDomainBudgets = 100 }))
	s.SetCrawlPolicy(tieredDefault("victim"))
	s.SetCrawlPolicy(tieredDefault("flood"))
	escalate(t, s, "victim", "bans.example")
	for i := range 1000 {
		release(t, s, acquire(t, s, AcquireRequest{Namespace: "flood", Domain: fmt.Sprintf("junk-%d.example", i)}))
	}
	s.mu.Lock()
	got := map[string]int{"flood": s.st.tiers.lru["flood"].Len(), "victim": s.st.tiers.lru["victim"].Len(), "total": s.st.tiers.domainTotal}
	s.mu.Unlock()
	if diff := cmp.Diff(map[string]int{"flood": 50, "victim": 1, "total": 51}, got); diff != "" {
		t.Errorf("tier states kept (-want +got):\n%s", diff)
	}
	if l := acquire(t, s, AcquireRequest{Namespace: "victim", Domain: "bans.example"}); l.Proxy.Pool != "residential" {
		t.Errorf("after the flood, victim's bans.example is granted on %s, want residential still", l.Proxy.Pool)
	}
	if err := s.checkConsistency(); err != nil {
		t.Error(err)
	}
	if snap := m.Snapshot(); snap.Evictions[StateTiers] != 950 || snap.Entries[StateTiers] != 51 {
		t.Errorf("state metrics: %d evictions, %d entries of %s; want 950 and 51", snap.Evictions[StateTiers], snap.Entries[StateTiers], StateTiers)
	}
	// A third namespace with a default rule: the shares shrink to 33, and
	// flood gives back its least recently used at once; victim keeps its.
	s.SetCrawlPolicy(tieredDefault("third"))
	s.mu.Lock()
	got = map[string]int{"flood": s.st.tiers.lru["flood"].Len(), "victim": s.st.tiers.lru["victim"].Len(), "total": s.st.tiers.domainTotal}
	s.mu.Unlock()
	if diff := cmp.Diff(map[string]int{"flood": 33, "victim": 1, "total": 34}, got); diff != "" {
		t.Errorf("tier states kept after the shares shrank (-want +got):\n%s", diff)
	}
	if err := s.checkConsistency(); err != nil {
		t.Error(err)
	}
}

// TestNewLeaderKeepsTheTierOfRelearnedLeases: a domain escalated on the
// old leader is on the residential tier on the new one as soon as it
// relearns a live lease of the domain on a residential proxy.
func TestNewLeaderKeepsTheTierOfRelearnedLeases(t *testing.T) {
	tl := newTwoLeaders(t, tieredFleet(testNamespace, 10)...)
	tl.old.SetCrawlPolicy(tieredDefault(testNamespace))
	tl.new.SetCrawlPolicy(tieredDefault(testNamespace))
	escalate(t, tl.old, testNamespace, "bans.example")
	held := acquire(t, tl.old, AcquireRequest{Namespace: testNamespace, Domain: "bans.example"})
	tl.lead(DefaultTTL)
	tl.clk.Step(10 * time.Second)
	if _, err := tl.new.RenewAs("", held.ID, 0, Report{}); err != nil {
		t.Fatal(err)
	}
	tl.clk.Step(DefaultTTL) // the recovery is over
	if l := acquire(t, tl.new, AcquireRequest{Namespace: testNamespace, Domain: "bans.example"}); l.Proxy.Pool != "residential" {
		t.Errorf("the new leader grants bans.example on %s, want residential (the relearned lease's tier)", l.Proxy.Pool)
	}
	if l := acquire(t, tl.new, AcquireRequest{Namespace: testNamespace, Domain: "calm.example"}); l.Proxy.Pool != "own-vms" {
		t.Errorf("the new leader grants calm.example on %s, want own-vms", l.Proxy.Pool)
	}
}

// TestPolicyChangeKeepsTiersOnlyWhereTheyStayTheSame: a change that
// leaves a rule's tiers as they were keeps its tier states; renaming a
// tier drops them (the indices would mean other proxies).
func TestPolicyChangeKeepsTiersOnlyWhereTheyStayTheSame(t *testing.T) {
	// escalate's five bans would also block the site on own-vms
	// (sitebans.go): a bound above them keeps this test to tier states.
	s, _, _ := newTestStore(t, tieredFleet(testNamespace, 10), withStoreConfig(func(c *Config) { c.SiteBanProxies = MaxSiteBanProxies }))
	p := tieredDefault(testNamespace)
	s.SetCrawlPolicy(p)
	escalate(t, s, testNamespace, "bans.example")
	p.Default = &DomainLimits{MaxConcurrent: 50}
	s.SetCrawlPolicy(p)
	if l := acquire(t, s, AcquireRequest{Namespace: testNamespace, Domain: "bans.example"}); l.Proxy.Pool != "residential" {
		t.Errorf("after a change of limits: granted on %s, want residential", l.Proxy.Pool)
	} else {
		release(t, s, l)
	}
	renamed := twoTiers(tier.Config{})
	renamed.Names = []string{"own-vms", "network"}
	p.Tiers = map[string]*Tiering{DefaultRuleHost: renamed}
	s.SetCrawlPolicy(p)
	if l := acquire(t, s, AcquireRequest{Namespace: testNamespace, Domain: "bans.example"}); l.Proxy.Pool != "own-vms" {
		t.Errorf("after renaming a tier: granted on %s, want own-vms (started afresh)", l.Proxy.Pool)
	}
}

// tierTestMetrics adds the TierMetrics to testMetrics.
type tierTestMetrics struct {
	*storetest.Metrics
	mu     sync.Mutex
	grants map[string]int64 // by tier index, for the default rule of "polite"
}

func (m *tierTestMetrics) ObserveTierGrant(namespace, policy, rule string, tier int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.grants[fmt.Sprint(tier)]++
}

func (m *tierTestMetrics) ObserveTierOutcomes(string, string, string, int, string, int64) {}

func (m *tierTestMetrics) tierGrants() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.grants)
}

func TestInsertBusiestKeepsTheTopTen(t *testing.T) {
	var top []DomainTier
	for i := range 30 {
		// Grants 0, 7, 14, ... mod 30: every value once, out of order.
		g := int64(i * 7 % 30)
		top = insertBusiest(top, DomainTier{Domain: fmt.Sprintf("d%02d", g), Grants: g})
	}
	top = insertBusiest(top, DomainTier{Domain: "a-tie", Grants: 29})
	var got []string
	for _, d := range top {
		got = append(got, fmt.Sprintf("%s:%d", d.Domain, d.Grants))
	}
	want := []string{"a-tie:29", "d29:29", "d28:28", "d27:27", "d26:26", "d25:25", "d24:24", "d23:23", "d22:22", "d21:21"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("busiest (-want +got):\n%s", diff)
	}
}

// TestProbeWithNothingFreeGoesToTheCurrentTier: after the quiet period a
// probe of the cheaper tier finds no free proxy there; the grant goes to
// the budget's tier instead of being refused, and the probe comes with a
// later grant once the cheaper tier has room.
func TestProbeWithNothingFreeGoesToTheCurrentTier(t *testing.T) {
	fleet := tieredFleet(testNamespace, 10)
	s, clk, _ := newTestStore(t, fleet)
	s.SetCrawlPolicy(tieredDefault(testNamespace))
	escalate(t, s, testNamespace, "bans.example")
	clk.Step(tier.DefaultQuietPeriod)
	for _, p := range fleet {
		if p.Pool == "own-vms" {
			p.Ready = false
			s.Upsert(p)
		}
	}
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", Namespace: testNamespace, Domain: "bans.example"})
	if err != nil || l.Proxy.Pool != "residential" {
		t.Fatalf("a probe with no own VM Ready: granted %q, err %v; want residential", l.Proxy.Pool, err)
	}
	release(t, s, l)
	for _, p := range fleet {
		s.Upsert(p)
	}
	if l := acquire(t, s, AcquireRequest{Namespace: testNamespace, Domain: "bans.example"}); l.Proxy.Pool != "own-vms" {
		t.Errorf("with own VMs Ready again, the probe went to %s, want own-vms", l.Proxy.Pool)
	}
}

// TestTieredAcquireKeepsItsCountry: a country is a constraint of its own,
// not a selector, so an acquire naming one stays tiered, and gets a proxy
// both of its budget's tier and of that country.
func TestTieredAcquireKeepsItsCountry(t *testing.T) {
	var fleet []ProxyInfo
	for _, c := range []string{"DE", "US"} {
		for i := range 3 {
			fleet = append(fleet,
				newProxy(fmt.Sprintf("vm-%s-%d", c, i), inNamespace(testNamespace), inTierPool("own-vms"), inCountryOf(c), withMaxLeases(100)),
				newProxy(fmt.Sprintf("res-%s-%d", c, i), inNamespace(testNamespace), inTierPool("residential"), inCountryOf(c), withMaxLeases(100)))
		}
	}
	s, _, _ := newTestStore(t, fleet)
	s.SetCrawlPolicy(tieredDefault(testNamespace))
	escalate(t, s, testNamespace, "bans.example")
	tests := map[string]struct {
		req                   AcquireRequest
		wantPool, wantCountry string
	}{
		"escalated domain, DE": {req: AcquireRequest{Namespace: testNamespace, Domain: "bans.example", Country: "DE"}, wantPool: "residential", wantCountry: "DE"},
		"escalated domain, US": {req: AcquireRequest{Namespace: testNamespace, Domain: "bans.example", Country: "US"}, wantPool: "residential", wantCountry: "US"},
		"calm domain, DE":      {req: AcquireRequest{Namespace: testNamespace, Domain: "calm.example", Country: "DE"}, wantPool: "own-vms", wantCountry: "DE"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for range 5 {
				l := acquire(t, s, tc.req)
				release(t, s, l)
				country := strings.Split(l.Proxy.Key.Name, "-")[1]
				if l.Proxy.Pool != tc.wantPool || country != tc.wantCountry {
					t.Errorf("granted %s of pool %q, want pool %q in %s", l.Proxy.Key, l.Proxy.Pool, tc.wantPool, tc.wantCountry)
				}
			}
		})
	}
}
