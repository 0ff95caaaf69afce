package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// The replay (issue 61): a seeded random workload runs on store A; every
// effect A applies is encoded to bytes and decoded again, and applied in
// order to a fresh store B made with Config.Follower, whose decision code
// panics if called. At every checkpoint B's whole state, dumped with no
// field ignored but those that are not state (dumpState), equals A's.

const (
	replayOps         = 100_000
	replayCheckpoints = 100
	replayMinPerKind  = 1_000
)

func TestReplayReachesTheSameState(t *testing.T) {
	ops := replayOps
	if testing.Short() {
		ops = 20_000
	}
	const seed = 61
	r := runReplay(t, seed, ops, nil)
	if !testing.Short() {
		var few []string
		for _, k := range Kinds() {
			if r.counts[k] < replayMinPerKind {
				few = append(few, fmt.Sprintf("%s %d", k, r.counts[k]))
			}
		}
		if len(few) > 0 {
			t.Errorf("kinds of effect seen fewer than %d times: %s", replayMinPerKind, strings.Join(few, ", "))
		}
	}
	var report []string
	for _, k := range Kinds() {
		report = append(report, fmt.Sprintf("%s=%d", k, r.counts[k]))
	}
	t.Logf("%d operations, %d effects (%d bytes encoded), %d checkpoints equal; by kind: %s",
		ops, len(r.encoded), r.bytes, r.checkpoints, strings.Join(report, " "))
	if diff := cmp.Diff(wantNotState(), r.skipped); diff != "" {
		t.Errorf("fields the dump skips (-documented +skipped):\n%s", diff)
	}

	// The follower decides nothing: its lease calls answer that it does
	// not lead, and what time would do is the leader's to say.
	if _, err := r.follower.Acquire(t.Context(), AcquireRequest{Holder: "w"}); !errors.Is(err, ErrNotLeader) {
		t.Errorf("the follower's Acquire: %v, want ErrNotLeader", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the follower's expiry ran")
			}
		}()
		r.follower.mu.Lock()
		defer r.follower.mu.Unlock()
		r.follower.advance(t0.Add(time.Hour))
	}()

	again := runReplay(t, seed, ops, nil)
	if !slices.EqualFunc(r.encoded, again.encoded, slices.Equal) {
		t.Errorf("the same seed gave other effects: %d and %d effects", len(r.encoded), len(again.encoded))
	}
}

// wantNotState is what changes without an effect, as docs/architecture.md
// and docs/decisions/0370-lease-store-components-and-effects.md name it.
func wantNotState() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range notState {
			if !yield(k) {
				return
			}
		}
	})
}

// TestReplayCatchesALostOrDoubledEffect: the comparison is what catches a
// follower that missed an effect or applied one twice.
func TestReplayCatchesALostOrDoubledEffect(t *testing.T) {
	for name, tc := range map[string]struct {
		kind Kind
		// twice: apply the effect twice; else drop it.
		twice bool
	}{
		"a ban dropped":             {kind: KindBan},
		"an outcome count dropped":  {kind: KindOutcomeCount},
		"a renewal dropped":         {kind: KindRenew},
		"a ban applied twice":       {kind: KindBan, twice: true},
		"an outcome applied twice":  {kind: KindOutcomeCount, twice: true},
		"a polite note twice":       {kind: KindPoliteNote, twice: true},
		"a session drop dropped":    {kind: KindSessionDrop},
		"a cool-down lapse dropped": {kind: KindCooldownLapse},
	} {
		t.Run(name, func(t *testing.T) {
			// The 20th of its kind that changes something: an effect can be
			// a no-op, such as a renewal at the instant of its grant.
			seen, done := 0, false
			tamper := func(e Effect, follower *Store) []Effect {
				if done || e.Kind() != tc.kind || noChange(e, follower) {
					return []Effect{e}
				}
				if seen++; seen < 20 {
					return []Effect{e}
				}
				done = true
				if tc.twice {
					return []Effect{e, e}
				}
				return nil
			}
			r := runReplay(t, 7, 5_000, tamper)
			if !done {
				t.Fatalf("the workload made no %s", tc.kind)
			}
			if r.firstDiff == "" {
				t.Fatalf("the follower's state equals the leader's after %s", name)
			}
			t.Logf("caught at checkpoint %d: %s", r.checkpoints+1, r.firstDiff)
		})
	}
}

// noChange says whether e would leave follower as it is: a renewal to the
// expiry and TTL its lease has.
func noChange(e Effect, follower *Store) bool {
	r, ok := e.(Renew)
	if !ok {
		return false
	}
	l := follower.st.leases[r.key]
	return l != nil && l.expiresAt.Equal(r.expiresAt) && l.ttl == r.ttl
}

type replayResult struct {
	follower    *Store
	encoded     [][]byte
	bytes       int
	counts      map[Kind]int
	checkpoints int
	skipped     []string
	// firstDiff is the first line where B's dump differed from A's, or a
	// panic of B's apply; empty when they never differed.
	firstDiff string
}

// effectLog is A's journal: every effect, encoded.
type effectLog struct {
	encoded [][]byte
	counts  map[Kind]int
	bytes   int
}

func (j *effectLog) Append(b []byte, _ bool) {
	j.encoded = append(j.encoded, slices.Clone(b))
	j.counts[Kind(b[1])]++
	j.bytes += len(b)
}

func (j *effectLog) Seal() Pending { return nil }

// runReplay runs ops operations of the seeded workload on A and replays its
// effects, decoded, on B (through tamper when set). Unless tamper is set,
// a difference fails the test; with it, the difference is the result.
func runReplay(t *testing.T, seed uint64, ops int, tamper func(Effect, *Store) []Effect) replayResult {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	log := &effectLog{counts: map[Kind]int{}}
	cfg := replayConfig(clk)
	cfg.Journal = log
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fcfg := replayConfig(clk)
	fcfg.Follower = true
	b, err := New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkload(seed, a, clk)
	res := replayResult{counts: log.counts, follower: b}
	applied := 0
	every := max(1, ops/replayCheckpoints)
	for i := 1; i <= ops; i++ {
		w.step()
		tampered := false
		for _, raw := range log.encoded[applied:] {
			e, err := DecodeEffect(raw)
			if err != nil {
				t.Fatalf("decoding effect %d: %v", applied, err)
			}
			batch := []Effect{e}
			if tamper != nil {
				batch = tamper(e, b)
				tampered = tampered || len(batch) != 1
			}
			if msg := applyOrPanic(b, batch); msg != "" {
				res.firstDiff = msg
				return res
			}
			applied++
		}
		// A checkpoint every ops/replayCheckpoints operations, and right
		// after an operation whose effects were tampered with.
		if i%every != 0 && i != ops && !tampered {
			continue
		}
		if err := a.checkConsistency(); err != nil && tamper == nil {
			t.Fatalf("after %d operations the leader's structures are broken: %v", i, err)
		}
		da, skipped := dumpStore(a)
		db, _ := dumpStore(b)
		res.skipped = skipped
		if da != db {
			res.firstDiff = firstDifference(da, db)
			if tamper == nil {
				t.Fatalf("checkpoint %d (after %d operations, %d effects): the follower differs: %s\nlast operations:\n%s",
					res.checkpoints+1, i, applied, res.firstDiff, strings.Join(w.last(), "\n"))
			}
			return res
		}
		res.checkpoints++
	}
	res.encoded, res.bytes = log.encoded, log.bytes
	return res
}

func applyOrPanic(s *Store, batch []Effect) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("the follower's apply panicked: %v", r)
		}
	}()
	s.Apply(batch...)
	return ""
}

func dumpStore(s *Store) (string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dumpState(s.st)
}

func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d: leader %q, follower %q", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("the leader's dump has %d lines, the follower's %d", len(la), len(lb))
}

// replayConfig is small caps and short times, so that every bound and
// every time-driven effect is reached within the workload.
func replayConfig(clk *clocktesting.FakeClock) Config {
	return Config{
		Clock: clk, Key: testKey,
		DefaultTTL: 10 * time.Second, MinTTL: 5 * time.Second, MaxTTL: time.Minute,
		CooldownBase: time.Second, CooldownMax: 8 * time.Second, CooldownDecay: 4 * time.Second,
		SessionIdle: 20 * time.Second, MaxSessions: 40, MaxCooldowns: 60, MaxDomainBudgets: 4,
		MaxStateBytes: 20 << 10, MaxStateEntries: 30, MaxStateBytesPerOwner: 8 << 10,
		MaxLeasesPerOwner: 12,
	}
}

// workload drives a store with random operations of every kind.
type workload struct {
	rng     *rand.Rand
	s       *Store
	clk     *clocktesting.FakeClock
	proxies []ProxyInfo // by index; a removed one has Ready false and removed true
	removed []bool
	ids     []leaseRef // IDs handed out, some long dead
	prevIDs []leaseRef // the IDs of the previous term, for relearning
	uids    int
	ops     []string
}

type leaseRef struct {
	id, owner string
}

var (
	replayOwners     = []string{"", "alice", "bob", "carol"}
	replayNamespaces = []string{"crawl", "other", "third"}
	replayDomains    = []string{"a.example", "b.example", "shop.example", "shop.example", "img.shop.example", "news.example"}
	replayCountries  = []string{"DE", "FR", "US"}
)

func newWorkload(seed uint64, s *Store, clk *clocktesting.FakeClock) *workload {
	w := &workload{rng: rand.New(rand.NewPCG(seed, seed^0x61)), s: s, clk: clk}
	for i := range 24 {
		w.proxies = append(w.proxies, w.newProxy(i))
		w.removed = append(w.removed, false)
		s.Upsert(w.proxies[i])
	}
	s.Lead(time.Time{}, clk.Now().Add(time.Hour))
	for _, ns := range replayNamespaces[:2] {
		w.setPolicy(ObjectName{Namespace: ns, Name: "policy0"})
	}
	return w
}

func (w *workload) newProxy(i int) ProxyInfo {
	w.uids++
	p := ProxyInfo{
		Key:           ObjectName{Namespace: replayNamespaces[i%len(replayNamespaces)], Name: "p" + strconv.Itoa(i)},
		UID:           types.UID("uid-" + strconv.Itoa(w.uids)),
		ProviderID:    "instance-" + strconv.Itoa(w.uids),
		Ready:         true,
		URL:           "http://127.0.0.1:3128/p" + strconv.Itoa(i),
		LatencyMillis: int64(w.rng.IntN(40)),
		MaxLeases:     int32(1 + w.rng.IntN(3)),
		Labels:        map[string]string{"tier": []string{"cheap", "dear"}[i%2]},
		ExitCountry:   replayCountries[i%len(replayCountries)],
		ReadySince:    w.clk.Now(),
	}
	if i%3 != 2 {
		p.Pool = "pool" + strconv.Itoa(i%2)
	}
	return p
}

func (w *workload) pick(n int) int { return w.rng.IntN(n) }

func (w *workload) last() []string { return w.ops[max(0, len(w.ops)-20):] }

func (w *workload) note(format string, args ...any) {
	w.ops = append(w.ops, fmt.Sprintf(format, args...))
	if len(w.ops) > 200 {
		w.ops = w.ops[100:]
	}
}

// step runs one random operation.
func (w *workload) step() {
	type op struct {
		weight int
		run    func()
	}
	ops := [...]op{
		{60, w.acquire}, {16, w.renew}, {34, w.release}, {8, w.report}, {14, w.putState},
		{4, w.forgetSession}, {24, w.tick}, {12, w.changeProxy}, {7, w.changePolicy},
		{4, w.forgetPool}, {7, w.changeTerm}, {4, w.setHorizon}, {11, w.relearn},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := w.pick(total)
	for _, o := range ops {
		if n < o.weight {
			o.run()
			return
		}
		n -= o.weight
	}
}

func (w *workload) acquire() {
	req := AcquireRequest{Holder: "w" + strconv.Itoa(w.pick(6)), Owner: replayOwners[w.pick(len(replayOwners))]}
	if w.pick(2) == 0 {
		req.Namespace = replayNamespaces[w.pick(len(replayNamespaces))]
	}
	if w.pick(4) > 0 {
		req.Domain = replayDomains[w.pick(len(replayDomains))]
		if w.pick(3) > 0 {
			req.Domain = fmt.Sprintf("d%d.example", w.pick(60)) // the default rule's per-domain budgets
		}
	}
	if w.pick(2) == 0 {
		// A session is one crawler's: the same owner and namespace each time.
		i := w.pick(8)
		req.Session, req.Owner, req.Namespace = "s"+strconv.Itoa(i), replayOwners[i%len(replayOwners)], sessionNamespace(i)
	}
	if req.Domain == "shop.example" && req.Namespace == "" {
		req.Namespace = replayNamespaces[w.pick(len(replayNamespaces))] // a budget binds within a namespace
	}
	if w.pick(4) == 0 {
		req.RequestID = "r" + strconv.Itoa(w.pick(40)) // some sent again
	}
	if w.pick(8) == 0 {
		req.Country = replayCountries[w.pick(len(replayCountries))]
	}
	if w.pick(8) == 0 {
		req.Selector = labels.SelectorFromSet(labels.Set{"tier": []string{"cheap", "dear"}[w.pick(2)]})
	}
	if w.pick(4) == 0 {
		req.TTL = time.Duration(5+w.pick(40)) * time.Second
	}
	l, err := w.s.Acquire(context.Background(), req)
	w.note("acquire %+v: %v", req, err)
	if err == nil {
		w.ids = append(w.ids, leaseRef{l.ID, l.Owner})
		if len(w.ids) > 400 {
			w.ids = w.ids[200:]
		}
	}
}

func (w *workload) someID() (leaseRef, bool) {
	if len(w.ids) == 0 {
		return leaseRef{}, false
	}
	// Mostly the latest ones: they are the live ones.
	back := w.pick(6)
	if w.pick(5) == 0 {
		back = w.pick(len(w.ids))
	}
	return w.ids[max(0, len(w.ids)-1-back)], true
}

func (w *workload) renew() {
	ref, ok := w.someID()
	if !ok {
		return
	}
	ttl := time.Duration(0)
	if w.pick(3) == 0 {
		ttl = time.Duration(5+w.pick(50)) * time.Second
	}
	l, err := w.s.RenewAs(ref.owner, ref.id, ttl, Report{})
	w.note("renew: %v", err)
	if err == nil {
		w.ids = append(w.ids, leaseRef{l.ID, l.Owner})
	}
}

func (w *workload) release() {
	ref, ok := w.someID()
	if !ok {
		return
	}
	outcome := []Outcome{OutcomeOK, OutcomeOK, OutcomeBanned, OutcomeBanned, OutcomeError}[w.pick(5)]
	domain := ""
	if w.pick(2) == 0 {
		domain = replayDomains[w.pick(len(replayDomains))]
	}
	err := w.s.ReleaseAs(ref.owner, ref.id, outcome, domain, Report{})
	w.note("release %s %s: %v", outcome, domain, err)
}

func (w *workload) report() {
	ref, ok := w.someID()
	if !ok {
		return
	}
	r := Report{OKRequests: int64(w.pick(20)), TransferredBytes: int64(w.pick(1 << 20))}
	if w.pick(2) == 0 {
		err := w.s.ReleaseAs(ref.owner, ref.id, OutcomeOK, "", r)
		w.note("release with a report: %v", err)
		return
	}
	l, err := w.s.RenewAs(ref.owner, ref.id, 0, r)
	w.note("renew with a report: %v", err)
	if err == nil {
		w.ids = append(w.ids, leaseRef{l.ID, l.Owner})
	}
}

func (w *workload) putState() {
	blob := make([]byte, w.pick(3000))
	for i := range blob {
		blob[i] = byte(w.pick(256))
	}
	if w.pick(2) == 0 {
		ref, ok := w.someID()
		if !ok {
			return
		}
		err := w.s.PutStateAs(ref.owner, ref.id, blob)
		w.note("put state %d bytes: %v", len(blob), err)
		return
	}
	i := w.pick(8)
	err := w.s.PutSessionStateAs(replayOwners[i%len(replayOwners)], sessionNamespace(i), "s"+strconv.Itoa(i), "", blob)
	w.note("put session state: %v", err)
}

// sessionNamespace is the namespace session i acquires in ("" for any).
func sessionNamespace(i int) string {
	return append([]string{""}, replayNamespaces...)[i%(len(replayNamespaces)+1)]
}

func (w *workload) forgetSession() {
	i := w.pick(8)
	w.s.ForgetSession(replayOwners[i%len(replayOwners)], sessionNamespace(i), "s"+strconv.Itoa(i))
	w.note("forget session")
}

func (w *workload) tick() {
	d := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, time.Second, 3 * time.Second, 11 * time.Second}[w.pick(6)]
	w.clk.Step(d)
	w.s.Advance()
	w.note("tick %v", d)
}

func (w *workload) changeProxy() {
	i := w.pick(len(w.proxies))
	p := w.proxies[i]
	if w.removed[i] {
		p = w.newProxy(i)
		w.removed[i] = false
		w.proxies[i] = p
		w.s.Upsert(p)
		w.note("restore %s", p.Key)
		return
	}
	switch w.pick(11) {
	case 0, 9, 10:
		w.s.Remove(p.Key)
		w.removed[i] = true
		w.note("remove %s", p.Key)
		return
	case 1:
		p.Ready = !p.Ready
		p.ReadySince = w.clk.Now()
	case 2:
		p.MaxLeases = int32(1 + w.pick(3))
	case 3:
		p.LatencyMillis = int64(w.pick(40))
	case 4:
		p.ProviderID = "instance-" + strconv.Itoa(w.pick(1000))
	case 5:
		p.Draining = !p.Draining
	case 6:
		p.Labels = map[string]string{"tier": []string{"cheap", "dear"}[w.pick(2)]}
	case 7:
		p.UID = types.UID("uid-x" + strconv.Itoa(w.pick(1000)))
	case 8:
		p.ExitCountry = replayCountries[w.pick(len(replayCountries))]
	}
	w.proxies[i] = p
	w.s.Upsert(p)
	w.note("upsert %s", p.Key)
}

// changePolicy changes mostly the third namespace's policies, so that the
// others' per-domain budgets live long enough to be evicted.
func (w *workload) changePolicy() {
	ns := replayNamespaces[2]
	if w.pick(5) == 0 {
		ns = replayNamespaces[w.pick(2)]
	}
	key := ObjectName{Namespace: ns, Name: "policy" + strconv.Itoa(w.pick(2))}
	if w.pick(3) == 0 {
		w.s.DeleteCrawlPolicy(key)
		w.note("delete policy %s", key)
		return
	}
	w.setPolicy(key)
}

func (w *workload) setPolicy(key ObjectName) {
	limits := func() DomainLimits {
		return DomainLimits{MaxConcurrent: w.pick(3), MinInterval: time.Duration(w.pick(3)) * time.Second,
			MinIntervalPerProxy: time.Duration(w.pick(2)) * 2 * time.Second}
	}
	strict := DomainLimits{MaxConcurrent: 1, MinInterval: time.Duration(1+w.pick(3)) * time.Second}
	p := CrawlPolicy{Key: key, Rules: map[string]DomainLimits{"shop.example": strict, "*.shop.example": limits(), "a.example": limits()}}
	if w.pick(3) > 0 {
		d := limits()
		p.Default = &d
	}
	if w.pick(2) == 0 {
		tiering := func() *Tiering {
			return &Tiering{Names: []string{"cheap", "dear"},
				Selectors: []labels.Selector{labels.SelectorFromSet(labels.Set{"tier": "cheap"}), labels.SelectorFromSet(labels.Set{"tier": "dear"})},
				Config:    tier.Config{Window: 20 * time.Second, MinOutcomes: 2, QuietPeriod: 30 * time.Second, ProbeShare: 0.5}.WithDefaults()}
		}
		p.Tiers = map[string]*Tiering{"shop.example": tiering()}
		if p.Default != nil {
			p.Tiers[DefaultRuleHost] = tiering()
		}
	}
	w.s.SetCrawlPolicy(p)
	w.note("set policy %s", key)
}

func (w *workload) forgetPool() {
	w.s.ForgetPool(ObjectName{Namespace: replayNamespaces[w.pick(3)], Name: "pool" + strconv.Itoa(w.pick(2))})
	w.note("forget pool")
}

// changeTerm ends the term and starts the next, mostly with a recovery in
// which the previous term's leases are relearnt from their IDs.
func (w *workload) changeTerm() {
	if w.pick(3) == 0 {
		// A follower promoted (here the store that already decides): a
		// new term with nothing to recover, no lease ending early.
		err := w.s.Promote(time.Duration(w.pick(3)) * time.Second)
		w.note("promote: %v", err)
		return
	}
	live, _ := w.s.List(LeaseFilter{})
	w.prevIDs = w.prevIDs[:0]
	for _, l := range live {
		w.prevIDs = append(w.prevIDs, leaseRef{l.ID, l.Owner})
	}
	w.s.Abdicate()
	recoverUntil := time.Time{}
	if w.pick(16) > 0 {
		recoverUntil = w.clk.Now().Add(time.Duration(1+w.pick(5)) * time.Second)
	}
	horizon := time.Time{}
	if w.pick(2) == 0 {
		horizon = w.clk.Now().Add(30 * time.Second)
	}
	w.clk.Step(time.Millisecond)
	w.s.Lead(recoverUntil, horizon)
	w.note("new term, recovering until %v, horizon %v", recoverUntil, horizon)
}

func (w *workload) setHorizon() {
	w.s.SetHorizon(w.clk.Now().Add(time.Duration(30+w.pick(90)) * time.Second))
	w.note("set horizon")
}

// relearn renews or releases an ID of the previous term.
func (w *workload) relearn() {
	if len(w.prevIDs) == 0 {
		w.renew()
		return
	}
	ref := w.prevIDs[w.pick(len(w.prevIDs))]
	if w.pick(4) == 0 {
		err := w.s.ReleaseAs(ref.owner, ref.id, []Outcome{OutcomeOK, OutcomeBanned}[w.pick(2)], "", Report{})
		w.note("release previous: %v", err)
		return
	}
	l, err := w.s.RenewAs(ref.owner, ref.id, 0, Report{})
	w.note("renew previous: %v", err)
	if err == nil {
		w.ids = append(w.ids, leaseRef{l.ID, l.Owner})
	}
}

// TestSnapshotRestoresTheSameState: at checkpoints of the seeded workload,
// a snapshot of A restored into a fresh store dumps exactly as A does: the
// same maps, the same order of every heap and list.
func TestSnapshotRestoresTheSameState(t *testing.T) {
	ops := 20_000
	if testing.Short() {
		ops = 5_000
	}
	clk := clocktesting.NewFakeClock(t0)
	a, err := New(replayConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkload(62, a, clk)
	var biggest int
	for i := 1; i <= ops; i++ {
		w.step()
		if i%(ops/50) != 0 {
			continue
		}
		var buf bytes.Buffer
		if err := a.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		biggest = max(biggest, buf.Len())
		cfg := replayConfig(clk)
		cfg.Follower = true
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Restore(&buf); err != nil {
			t.Fatalf("after %d operations: %v", i, err)
		}
		da, _ := dumpStore(a)
		dc, _ := dumpStore(c)
		if da != dc {
			t.Fatalf("after %d operations the restored state differs: %s\nlast operations:\n%s", i, firstDifference(da, dc), strings.Join(w.last(), "\n"))
		}
	}
	t.Logf("50 snapshots restored equal; the largest was %d bytes", biggest)
}

func TestRestoreRefusesWhatItDoesNotRead(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for name, b := range map[string][]byte{
		"no magic":       []byte("nope"),
		"newer format":   append([]byte(snapshotMagic), SnapshotFormat+1),
		"cut short":      good[:len(good)-3],
		"trailing bytes": append(slices.Clone(good), 0),
	} {
		if err := s.Restore(bytes.NewReader(b)); !errors.Is(err, ErrUnknownSnapshot) {
			t.Errorf("%s: %v, want ErrUnknownSnapshot", name, err)
		}
	}
	if got := s.Proxies("", nil); len(got) != 1 {
		t.Errorf("a refused snapshot changed the store: %d proxies", len(got))
	}
}
