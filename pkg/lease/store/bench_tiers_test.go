package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// BenchmarkTierStateMemory is the heap the default rule's tier states
// take under 100,000 domains (issue 53), beyond what their budgets take:
// the same acquires and releases for 100,000 new domains in a store whose
// default rule has two tiers and in one whose default rule has none.
// Then 50,000 more domains: the states stay at the cap (the namespace's
// share of --lease-max-domain-budgets, all of it here), or it fails.
//
// Run: go test -run '^$' -bench BenchmarkTierStateMemory -benchtime 1x ./pkg/lease/store
func BenchmarkTierStateMemory(b *testing.B) {
	const domains = store.DefaultMaxDomainBudgets
	var perDomain, totalMB float64
	for b.Loop() {
		var grown [2]float64
		for i, tiered := range []bool{false, true} {
			st, m := newTierBenchStore(b, tiered)
			before := liveHeap()
			acquireDomains(b, st, 0, domains)
			grown[i] = float64(liveHeap()) - float64(before)
			if tiered {
				acquireDomains(b, st, domains, domains/2)
				if got := m.entries[store.StateTiers]; got != domains {
					b.Fatalf("after %d domains, %d tier states; want the cap, %d", domains+domains/2, got, domains)
				}
			}
			runtime.KeepAlive(st)
		}
		perDomain = (grown[1] - grown[0]) / domains
		totalMB = (grown[1] - grown[0]) / (1 << 20)
	}
	b.ReportMetric(perDomain, "heap-B/domain")
	b.ReportMetric(totalMB, "heap-MB/100k-domains")
}

func acquireDomains(b *testing.B, st *store.Store, from, n int) {
	for i := from; i < from+n; i++ {
		l, err := st.Acquire(context.Background(), store.AcquireRequest{Holder: "w", Namespace: "crawl", Domain: "d" + strconv.Itoa(i) + ".example.com"})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.ReleaseAs("", l.ID, store.OutcomeOK, "", store.Report{}); err != nil {
			b.Fatal(err)
		}
	}
}

// newTierBenchStore is a leading store of 10 own VMs and 10 residential
// proxies of 10,000 slots in namespace crawl, under a default rule that
// never binds, with two tiers or none.
func newTierBenchStore(b *testing.B, tiered bool) (*store.Store, *stateCounts) {
	b.Helper()
	m := &stateCounts{entries: map[string]int{}}
	st, err := store.New(store.Config{Key: []byte("benchmark-key-of-thirty-two-byte"), Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		pool := []string{"own-vms", "residential"}[i%2]
		name := pool + "-" + strconv.Itoa(i)
		st.Upsert(store.ProxyInfo{Key: store.ObjectName{Namespace: "crawl", Name: name}, UID: types.UID(name), Ready: true,
			URL: fmt.Sprintf("http://127.0.0.%d:3128", 1+i), MaxLeases: 10_000, Pool: pool, Labels: map[string]string{"crawl.proxyfleet.io/pool": pool}})
	}
	st.Lead(time.Time{}, time.Time{})
	p := store.CrawlPolicy{Key: store.ObjectName{Namespace: "crawl", Name: "polite"}, Default: &store.DomainLimits{MaxConcurrent: 1000}}
	if tiered {
		p.Tiers = map[string]*store.Tiering{store.DefaultRuleHost: {Names: []string{"own-vms", "residential"},
			Selectors: []labels.Selector{labels.SelectorFromSet(labels.Set{"crawl.proxyfleet.io/pool": "own-vms"}),
				labels.SelectorFromSet(labels.Set{"crawl.proxyfleet.io/pool": "residential"})},
			Config: tier.Config{}.WithDefaults()}}
	}
	st.SetCrawlPolicy(p)
	return st, m
}

// stateCounts keeps the store's StateMetrics entries by kind.
type stateCounts struct {
	store.NoMetrics
	entries map[string]int
}

func (m *stateCounts) SetStateEntries(kind string, n int) { m.entries[kind] = n }
func (m *stateCounts) ObserveStateEviction(string)        {}

// BenchmarkTieredAcquire is one acquire+release for a domain the store
// already keeps, under a default rule without tiers and with two: what
// tiering adds to a grant (the tier's selector on each candidate, the
// state's choice and its bookkeeping, and the outcome fed back).
//
// Run: go test -run '^$' -bench BenchmarkTieredAcquire -cpu 1 ./pkg/lease/store
func BenchmarkTieredAcquire(b *testing.B) {
	for _, tiered := range []bool{false, true} {
		b.Run(map[bool]string{false: "untiered", true: "tiered"}[tiered], func(b *testing.B) {
			st, _ := newTierBenchStore(b, tiered)
			acquireDomains(b, st, 0, 1000)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l, err := st.Acquire(context.Background(), store.AcquireRequest{Holder: "w", Namespace: "crawl", Domain: "d" + strconv.Itoa(i%1000) + ".example.com"})
				if err != nil {
					b.Fatal(err)
				}
				if err := st.ReleaseAs("", l.ID, store.OutcomeOK, "", store.Report{}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkTierStatsAt100kDomains is one CrawlPolicyStats of a default
// rule with two tiers and 100,000 domains' tier states: the status writer
// asks every 5 s, and the walk for the busiest domains holds the store's
// lock for it.
//
// Run: go test -run '^$' -bench BenchmarkTierStatsAt100kDomains ./pkg/lease/store
func BenchmarkTierStatsAt100kDomains(b *testing.B) {
	st, _ := newTierBenchStore(b, true)
	acquireDomains(b, st, 0, store.DefaultMaxDomainBudgets)
	key := store.ObjectName{Namespace: "crawl", Name: "polite"}
	for b.Loop() {
		if stats := st.CrawlPolicyStats(key); len(stats) != 1 || len(stats[0].BusiestDomains) != store.MaxBusiestDomains {
			b.Fatalf("stats %+v, want the default rule with %d busiest domains", stats, store.MaxBusiestDomains)
		}
	}
}
