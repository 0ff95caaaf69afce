package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Benchmarks of the bounds on what callers create at will (issue 48).

// BenchmarkNewDomainAcquire is one acquire+release for a domain the store
// has no budget for, under a CrawlPolicy default rule at the default cap
// (100,000 budgets):
//
//	empty   few budgets: the budget is made, nothing to evict
//	full    the cap reached, 50,000 budgets pinned by held leases and made
//	        first, 50,000 idle after them: each acquire evicts one idle
//	        budget to make its own
//
// Run: go test -run '^$' -bench BenchmarkNewDomainAcquire ./pkg/lease/store
func BenchmarkNewDomainAcquire(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := map[bool]string{false: "empty", true: "full"}[full]
		b.Run(name, func(b *testing.B) {
			st := newBudgetBenchStore(b)
			ctx := context.Background()
			if full {
				for i := range store.DefaultMaxDomainBudgets {
					l, err := st.Acquire(ctx, store.AcquireRequest{Holder: "w", Domain: "held-" + strconv.Itoa(i) + ".example", TTL: 10 * time.Minute})
					if err != nil {
						b.Fatal(err)
					}
					if i >= store.DefaultMaxDomainBudgets/2 {
						if err := st.ReleaseAs("", l.ID, store.OutcomeOK, "", store.Report{}); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			i := 0
			for b.Loop() {
				l, err := st.Acquire(ctx, store.AcquireRequest{Holder: "w", Domain: "new-" + strconv.Itoa(i) + ".example"})
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

// newBudgetBenchStore is a leading store of 10 proxies of 10,000 slots in
// namespace crawl, under a default rule that never binds.
func newBudgetBenchStore(b *testing.B) *store.Store {
	b.Helper()
	st, err := store.New(store.Config{Key: []byte("benchmark-key-of-thirty-two-byte")})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		name := "p" + strconv.Itoa(i)
		st.Upsert(store.ProxyInfo{Key: store.ObjectName{Namespace: "crawl", Name: name}, UID: types.UID(name), Ready: true,
			URL: fmt.Sprintf("http://127.0.0.%d:3128", 1+i), MaxLeases: 10_000})
	}
	st.Lead(time.Time{}, time.Time{})
	st.SetCrawlPolicy(store.CrawlPolicy{Key: store.ObjectName{Namespace: "crawl", Name: "polite"}, Default: &store.DomainLimits{MaxConcurrent: 1000}})
	return st
}

// BenchmarkSessionStateMemory is the heap one kept session state costs
// against what --lease-max-state-bytes charges it (store.Store.StateBytes):
// 20,000 entries of one identity on one proxy, each for its own domain.
// heap/charged is the ratio issue 48 bounds to 1.5x.
//
// Run: go test -run '^$' -bench BenchmarkSessionStateMemory -benchtime 3x ./pkg/lease/store
func BenchmarkSessionStateMemory(b *testing.B) {
	const entries = 20_000
	for _, blob := range []int{1, 1 << 10} {
		b.Run(strconv.Itoa(blob)+"B", func(b *testing.B) {
			var grown, charged float64
			for b.Loop() {
				st := newStateBenchStore(b)
				state := make([]byte, blob)
				before := liveHeap()
				for i := range entries {
					l, err := st.Acquire(context.Background(), store.AcquireRequest{Holder: "w", Owner: "crawler", Domain: "d" + strconv.Itoa(i) + ".example.com"})
					if err != nil {
						b.Fatal(err)
					}
					if err := st.PutStateAs("crawler", l.ID, state); err != nil {
						b.Fatal(err)
					}
					if err := st.ReleaseAs("crawler", l.ID, store.OutcomeOK, "", store.Report{}); err != nil {
						b.Fatal(err)
					}
				}
				grown = float64(liveHeap()) - float64(before)
				charged = float64(st.StateBytes())
				runtime.KeepAlive(st)
			}
			b.ReportMetric(grown/entries, "heap-B/entry")
			b.ReportMetric(charged/entries, "charged-B/entry")
			b.ReportMetric(grown/charged, "heap/charged")
		})
	}
}

// newStateBenchStore is a leading store of one proxy whose session state
// caps are far above what BenchmarkSessionStateMemory keeps.
func newStateBenchStore(b *testing.B) *store.Store {
	b.Helper()
	st, err := store.New(store.Config{Key: []byte("benchmark-key-of-thirty-two-byte"),
		MaxStateBytes: 1 << 40, MaxStateEntries: 1 << 30, MaxStateBytesPerOwner: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	st.Upsert(store.ProxyInfo{Key: store.ObjectName{Namespace: "crawl", Name: "p0"}, UID: "p0", Ready: true, URL: "http://127.0.0.1:3128", MaxLeases: 1})
	st.Lead(time.Time{}, time.Time{})
	return st
}
