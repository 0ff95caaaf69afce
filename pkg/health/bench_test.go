package health

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// BenchmarkEngineOwnWork is the engine's own work per probe at 10,000
// proxies, without the probe: each op is one scheduling pass a tick
// (testTick) after the last, and the recording of every probe it
// dispatched, as if each had succeeded at once. pkg/testsuites/bench/health
// measures the engine with its probes; this isolates what issue 16's
// "engine ÷ bare loop" attributes to the engine (docs/decisions/0164-engine-own-work-probe-measured-alone.md).
func BenchmarkEngineOwnWork(b *testing.B) {
	const n = 10_000
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range n {
		// An address each, as a fleet has: proxies sharing one are bounded
		// together (MaxProbesPerEndpoint), and the pass would dispatch ten.
		ip := fmt.Sprintf("127.0.%d.%d", i/250, i%250+1)
		p := testProxy(fmt.Sprintf("px-%05d", i), withAddress(ip, 3128))
		p.Spec.Endpoint.Host = ip
		if err := store.Add(p); err != nil {
			b.Fatal(err)
		}
	}
	e, err := New(Config{Proxies: store, Enqueue: func(cache.ObjectName) {}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := t0
	var jobs []job
	dispatch := func(j job) bool { jobs = append(jobs, j); return true }
	// The first pass meets the fleet; then a steady state.
	e.schedule(ctx, now, dispatch)
	probes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(testTick)
		jobs = jobs[:0]
		e.schedule(ctx, now, dispatch)
		for _, j := range jobs {
			e.record(ctx, j, Result{OK: true, Class: ResultSuccess, Latency: time.Millisecond}, now, now)
			e.mu.Lock() // what a worker does after each probe (worker.go)
			e.endpoints.finished(j.state.address)
			e.mu.Unlock()
		}
		probes += len(jobs)
	}
	if probes < b.N*n/int(testInterval/testTick)/2 {
		b.Fatalf("%d probes in %d passes, want about %d a pass: the bench no longer measures the steady state", probes, b.N, n/int(testInterval/testTick))
	}
	b.ReportMetric(float64(probes)/float64(b.N), "probes/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(probes), "ns/probe")
}
