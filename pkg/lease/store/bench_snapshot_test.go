package store_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule/site"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
)

// BenchmarkSnapshotAtDefaultCaps is a Raft snapshot of the store at its
// default caps (issue 62): 10,000 proxies, DefaultMaxCooldowns cool-downs
// (each a banned release for a site of its own) and DefaultMaxStateBytes of
// session state (1 KiB blobs of five identities, each at its own cap).
// One op is one Store.Snapshot; the metrics are the snapshot's size, the
// time the store's lock is held for it (Snapshot encodes under the lock,
// into memory, and writes outside it: lock-ms ends when the write
// starts), the write, and a Restore into a fresh store. first-lock-ms is
// the store's first snapshot, taken before the ops: its buffer has no
// earlier size to start from and grows (a replica's first snapshot after
// it starts without one to restore).
//
// Run: go test -run '^$' -bench BenchmarkSnapshotAtDefaultCaps -benchtime 5x ./pkg/lease/store
func BenchmarkSnapshotAtDefaultCaps(b *testing.B) {
	st, metrics := newCapsStore(b)
	if n := metrics.Snapshot().Entries[store.StateCooldowns]; n != store.DefaultMaxCooldowns {
		b.Fatalf("%d cool-downs, want %d", n, store.DefaultMaxCooldowns)
	}
	stateBytes := st.StateBytes()
	firstLocked, _, _ := takeSnapshot(b, st)
	var locked, written, restored time.Duration
	var size int
	for b.Loop() {
		l, wr, w := takeSnapshot(b, st)
		locked += l
		written += wr
		size = w.buf.Len()

		b.StopTimer()
		fresh, _ := newBenchStoreConfig(b)
		runtime.GC()
		b.StartTimer()
		t0 := time.Now()
		if err := fresh.Restore(&w.buf); err != nil {
			b.Fatal(err)
		}
		restored += time.Since(t0)
		b.StopTimer()
		if got := fresh.StateBytes(); got != stateBytes {
			b.Fatalf("restored %d bytes of session state, want %d", got, stateBytes)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
	b.ReportMetric(float64(stateBytes)/(1<<20), "state-MiB")
	b.ReportMetric(firstLocked.Seconds()*1000, "first-lock-ms")
	b.ReportMetric(locked.Seconds()*1000/n, "lock-ms")
	b.ReportMetric(written.Seconds()*1000/n, "write-ms")
	b.ReportMetric(restored.Seconds()*1000/n, "restore-ms")
}

// takeSnapshot takes one snapshot of st: the time until its first write
// (the lock's release), the write's, and what was written.
func takeSnapshot(b *testing.B, st *store.Store) (locked, written time.Duration, w *stampedWriter) {
	b.Helper()
	w = &stampedWriter{}
	began := time.Now()
	if err := st.Snapshot(w); err != nil {
		b.Fatal(err)
	}
	return w.first.Sub(began), time.Since(w.first), w
}

// stampedWriter keeps what is written and when the first write came: the
// moment Snapshot released the store's lock.
type stampedWriter struct {
	buf   bytes.Buffer
	first time.Time
}

func (w *stampedWriter) Write(p []byte) (int, error) {
	if w.first.IsZero() {
		w.first = time.Now()
	}
	return w.buf.Write(p)
}

// newCapsStore is a leading store of 10,000 proxies filled to the default
// caps of cool-downs and session state.
func newCapsStore(b *testing.B) (*store.Store, *storetest.Metrics) {
	b.Helper()
	st, metrics := newBenchStoreConfig(b)
	ctx := context.Background()
	for i := range store.DefaultMaxCooldowns {
		domain := "ban-" + strconv.Itoa(i) + ".com"
		l, err := st.Acquire(ctx, store.AcquireRequest{Holder: "w", Owner: "crawler", Domain: domain})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.ReleaseAs("crawler", l.ID, store.OutcomeBanned, domain, store.Report{}); err != nil {
			b.Fatal(err)
		}
	}
	// Five identities, so that the per-identity cap (16 MiB) does not
	// bind before the store's (64 MiB).
	blob := bytes.Repeat([]byte("s"), 1<<10)
	for i := 0; st.StateBytes() < store.DefaultMaxStateBytes-4<<10; i++ {
		owner := "identity-" + strconv.Itoa(i%5)
		l, err := st.Acquire(ctx, store.AcquireRequest{Holder: "w", Owner: owner, Domain: "state-" + strconv.Itoa(i) + ".com"})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.PutStateAs(owner, l.ID, blob); err != nil {
			b.Fatal(err)
		}
		if err := st.ReleaseAs(owner, l.ID, store.OutcomeOK, "", store.Report{}); err != nil {
			b.Fatal(err)
		}
		if i > 2*store.DefaultMaxStateEntries {
			b.Fatalf("session state stays at %d bytes after %d puts", st.StateBytes(), i)
		}
	}
	return st, metrics
}

// newBenchStoreConfig is a leading store of 10,000 proxies with the
// default caps, the operator's site function and metrics to read.
func newBenchStoreConfig(b *testing.B) (*store.Store, *storetest.Metrics) {
	b.Helper()
	m := storetest.NewMetrics()
	st, err := store.New(store.Config{Key: []byte("benchmark-key-of-thirty-two-byte"), Metrics: m, Site: site.Of})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		name := "p" + strconv.Itoa(i)
		st.Upsert(store.ProxyInfo{
			Key: store.ObjectName{Namespace: "crawl", Name: name}, UID: types.UID(name), Ready: true,
			URL: fmt.Sprintf("http://127.0.%d.%d:3128", i/250, 1+i%250), MaxLeases: 1,
		})
	}
	st.Lead(time.Time{}, time.Time{})
	return st, m
}
