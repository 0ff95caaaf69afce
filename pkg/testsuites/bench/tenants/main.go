// Command tenants is issue 48's adversarial run against the lease store:
// 10 identities in 2 namespaces, each trying 100,000 distinct domains,
// for session state and for CrawlPolicy default-rule budgets at once.
// Every attempt acquires a fresh domain (a new default-rule budget), and
// when granted keeps a small state under the lease, tries to plant one
// for another domain through its session, and releases. Both namespaces'
// default rule is maxConcurrent 1 with minIntervalPerProxy 2m, so every
// budget is pinned for 2 minutes after its grant; a fake clock moves 1 ms
// an attempt, so pins come and go as the run goes on.
//
// Throughout (every -probe-every attempts) a probe checks in each
// attacked namespace and in a third, quiet one that its limits bind: a
// domain a victim holds is refused to anyone else, and a fresh domain,
// once granted, is refused a second concurrent lease. The leader's live
// heap is sampled (after a collection) every -heap-every attempts.
//
// The bound on the heap's growth: 1.5x --lease-max-state-bytes (the cap
// charges each entry within 1.5x of its heap, TestStateCapCountsWhatTheHeapHolds)
// plus 1 KiB per --lease-max-domain-budgets (a budget with its per-proxy
// interval map takes ~830 bytes) plus a margin of 16 MiB for the leases,
// sessions and the probes.
//
// The calls go straight to the store (store.Store), with each identity as
// the Owner the HTTP handlers would pass: the handlers add validation in
// front, and nothing that stays in memory.
//
//	go run ./pkg/testsuites/bench/tenants
//
// It prints markdown on stdout and progress on stderr, and exits 1 when
// the heap passed the bound or a limit failed to bind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

const (
	quiet          = "quiet"
	budgetHeapCost = 1 << 10
	heapMargin     = 16 << 20
)

var attacked = []string{"tenant-a", "tenant-b"}

// tally is what one namespace's attackers and probes saw.
type tally struct {
	tried, granted, limited, full, planted int
	// Probes: how often a limit failed to bind (granted beyond it), and
	// how often a fresh domain got its first lease.
	probes, guardedGranted, freshGranted, freshTwice int
}

type run struct {
	store   *store.Store
	clk     *clocktesting.FakeClock
	metrics *stateMetrics
	ctx     context.Context
	tallies map[string]*tally
	victims map[string]store.Lease // the lease each namespace's victim holds on guarded.example
	blob    []byte
	probeN  int
	// probeEvery is how many attempts go between two probes.
	probeEvery int

	baseline, peak uint64
}

func main() {
	var (
		identities = flag.Int("identities", 10, "attacking identities, split between the two namespaces")
		domains    = flag.Int("domains", 100_000, "distinct domains each identity tries")
		stateBytes = flag.Int("state-bytes", 16, "bytes of each state an attacker keeps")
		probeEvery = flag.Int("probe-every", 10_000, "attempts between two probes")
		heapEvery  = flag.Int("heap-every", 50_000, "attempts between two heap samples")
	)
	flag.Parse()
	r, err := newRun(*stateBytes)
	if err == nil {
		r.probeEvery = *probeEvery
		err = r.attack(*identities, *domains, *probeEvery, *heapEvery)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenants bench:", err)
		os.Exit(1)
	}
	if !r.report(*identities, *domains) {
		os.Exit(1)
	}
}

func newRun(stateBytes int) (*run, error) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC))
	m := &stateMetrics{entries: map[string]int{}, evictions: map[string]int{}}
	st, err := store.New(store.Config{Clock: clk, Key: []byte("benchmark-key-of-thirty-two-byte"), Metrics: m,
		MaxStateBytes: store.DefaultMaxStateBytes, MaxDomainBudgets: store.DefaultMaxDomainBudgets})
	if err != nil {
		return nil, err
	}
	r := &run{store: st, clk: clk, metrics: m, ctx: context.Background(), tallies: map[string]*tally{},
		victims: map[string]store.Lease{}, blob: make([]byte, stateBytes)}
	for _, ns := range append(attacked, quiet) {
		for i := range 10 {
			name := fmt.Sprintf("p%d", i)
			st.Upsert(store.ProxyInfo{Key: store.ObjectName{Namespace: ns, Name: name}, UID: types.UID(ns + "-" + name), Ready: true,
				URL: fmt.Sprintf("http://%s.%s:3128", name, ns), MaxLeases: 100})
		}
	}
	st.Lead(time.Time{}, time.Time{})
	for _, ns := range append(attacked, quiet) {
		st.SetCrawlPolicy(store.CrawlPolicy{Key: store.ObjectName{Namespace: ns, Name: "polite"},
			Default: &store.DomainLimits{MaxConcurrent: 1, MinIntervalPerProxy: 2 * time.Minute}})
		r.tallies[ns] = &tally{}
		l, err := st.Acquire(r.ctx, store.AcquireRequest{Holder: "victim", Owner: "victim-" + ns, Namespace: ns, Domain: "guarded.example", TTL: 10 * time.Minute})
		if err != nil {
			return nil, fmt.Errorf("the victim's lease in %s: %w", ns, err)
		}
		r.victims[ns] = l
	}
	r.baseline = liveHeap()
	return r, nil
}

// attack runs every identity's domains, interleaved, with the probes and
// the heap samples.
func (r *run) attack(identities, domains, probeEvery, heapEvery int) error {
	attempts := 0
	for i := range domains {
		for id := range identities {
			if err := r.attempt(fmt.Sprintf("attacker-%d", id), attacked[id%len(attacked)], i); err != nil {
				return err
			}
			r.clk.Step(time.Millisecond)
			if attempts++; attempts%probeEvery == 0 {
				if err := r.probe(); err != nil {
					return err
				}
			}
			if attempts%heapEvery == 0 {
				r.sampleHeap()
				fmt.Fprintf(os.Stderr, "tenants bench: %d attempts, heap +%.1f MiB\n", attempts, mib(r.peak-r.baseline))
			}
		}
	}
	r.sampleHeap()
	return nil
}

// attempt is one identity's try at one fresh domain.
func (r *run) attempt(owner, ns string, i int) error {
	t := r.tallies[ns]
	t.tried++
	domain := fmt.Sprintf("%s-%d.junk.example", owner, i)
	session := "s-" + owner
	l, err := r.store.Acquire(r.ctx, store.AcquireRequest{Holder: owner, Owner: owner, Namespace: ns, Domain: domain, Session: session})
	switch {
	case err == nil:
		t.granted++
	case errors.Is(err, store.ErrDomainBudgetsFull):
		t.full++
		return nil
	case errors.Is(err, store.ErrDomainLimited):
		t.limited++
		return nil
	default:
		return fmt.Errorf("%s acquiring %s: %w", owner, domain, err)
	}
	if err := r.store.PutStateAs(owner, l.ID, r.blob); err != nil {
		return fmt.Errorf("%s keeping state: %w", owner, err)
	}
	if r.store.PutSessionStateAs(owner, ns, session, "planted-"+domain, r.blob) == nil {
		t.planted++
	}
	return r.store.ReleaseAs(owner, l.ID, store.OutcomeOK, "", store.Report{})
}

// probe checks in every namespace that its limits bind.
func (r *run) probe() error {
	r.probeN++
	for _, ns := range append(attacked, quiet) {
		t := r.tallies[ns]
		t.probes++
		v, err := r.store.RenewAs("victim-"+ns, r.victims[ns].ID, 10*time.Minute, store.Report{})
		if err != nil {
			return fmt.Errorf("renewing the victim's lease in %s: %w", ns, err)
		}
		r.victims[ns] = v
		granted, err := r.tryHold(ns, "guarded.example")
		if err != nil {
			return err
		}
		if granted != nil {
			t.guardedGranted++
			_ = r.store.ReleaseAs(granted.Owner, granted.ID, store.OutcomeOK, "", store.Report{})
		}
		fresh := fmt.Sprintf("probe-%d.example", r.probeN)
		first, err := r.tryHold(ns, fresh)
		if err != nil || first == nil {
			continue
		}
		t.freshGranted++
		second, err := r.tryHold(ns, fresh)
		if err != nil {
			return err
		}
		if second != nil {
			t.freshTwice++
			_ = r.store.ReleaseAs(second.Owner, second.ID, store.OutcomeOK, "", store.Report{})
		}
		_ = r.store.ReleaseAs(first.Owner, first.ID, store.OutcomeOK, "", store.Report{})
	}
	return nil
}

// tryHold acquires domain in ns for a prober; nil when a limit refused it.
func (r *run) tryHold(ns, domain string) (*store.Lease, error) {
	l, err := r.store.Acquire(r.ctx, store.AcquireRequest{Holder: "prober", Owner: "prober-" + ns, Namespace: ns, Domain: domain})
	switch {
	case err == nil:
		return &l, nil
	case errors.Is(err, store.ErrDomainLimited):
		return nil, nil
	}
	return nil, fmt.Errorf("probe of %s in %s: %w", domain, ns, err)
}

func (r *run) sampleHeap() {
	if h := liveHeap(); h > r.peak {
		r.peak = h
	}
}

// report prints the tables and says whether the run held.
func (r *run) report(identities, domains int) bool {
	out := os.Stdout
	cfg := r.store.Config()
	fmt.Fprintf(out, "%d identities (%s), %d domains each, a %d-byte state per grant; probes every %d attempts in %s and %s.\n\n",
		identities, strings.Join(attacked, ", "), domains, len(r.blob), r.probeEvery, strings.Join(attacked, ", "), quiet)
	fmt.Fprintln(out, "| namespace | domains tried | granted | refused: budget binds | refused: share pinned | foreign-domain states accepted | probes | guarded domain granted to another | fresh domain granted | fresh domain granted twice |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	held := true
	for _, ns := range append(attacked, quiet) {
		t := r.tallies[ns]
		fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", ns, t.tried, t.granted, t.limited, t.full, t.planted,
			t.probes, t.guardedGranted, t.freshGranted, t.freshTwice)
		held = held && t.planted == 0 && t.guardedGranted == 0 && t.freshTwice == 0
	}
	bound := 1.5*float64(cfg.MaxStateBytes) + float64(budgetHeapCost*cfg.MaxDomainBudgets) + heapMargin
	grown := float64(r.peak) - float64(r.baseline)
	entries, evictions := r.metrics.snapshot()
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| live heap before | peak growth | bound | session states (charged) | state entries | state evictions | domain budgets | budget evictions | verdict |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	verdict := "within the bound, every limit bound"
	switch {
	case grown > bound:
		verdict, held = "**heap over the bound**", false
	case !held:
		verdict = "**a limit failed to bind**"
	}
	fmt.Fprintf(out, "| %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %d | %d | %d | %d | %s |\n", mib(r.baseline), grown/(1<<20), bound/(1<<20),
		mib(uint64(stateBytes(r.store))), entries["session_states"], evictions["session_states"], entries["domain_budgets"], evictions["domain_budgets"], verdict)
	return held
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// stateMetrics keeps the store's state gauges and eviction counts.
type stateMetrics struct {
	store.NoMetrics
	mu                 sync.Mutex
	entries, evictions map[string]int
}

func (m *stateMetrics) SetStateEntries(kind string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[kind] = n
}

func (m *stateMetrics) ObserveStateEviction(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evictions[kind]++
}

func (m *stateMetrics) snapshot() (entries, evictions map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries, m.evictions
}

// stateBytes is what the store's session state is charged against its cap.
func stateBytes(s *store.Store) int {
	n, _ := s.StateUse()
	return n
}
