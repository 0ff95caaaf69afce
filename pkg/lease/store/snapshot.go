package store

import (
	"bytes"
	"cmp"
	"container/list"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// A snapshot is the whole state as bytes, so that a replica that missed
// the effects (a new one, one far behind, a successor at a handover) starts
// from it and follows the effects after it. Restoring it gives a state
// equal to the one written, down to the order of its heaps and lists
// (TestSnapshotRestoresTheSameState), so that what apply decides by those
// orders (evictions) stays the same on every replica.
//
// Layout: the magic, the snapshot format, then each part in a fixed order,
// with the effects' field encoding (codec.go). What follows from the rest
// (counts, the selection orders, the per-proxy index of cool-downs) is not
// written: Restore rebuilds it.

const (
	snapshotMagic = "PXS1"
	// SnapshotFormat is the snapshot encoding's version: a replica refuses
	// a snapshot of a format it does not know. 2 added the site bans; a
	// snapshot of format 1 is read as one without any.
	SnapshotFormat = 2
)

// ErrUnknownSnapshot: the bytes are not a snapshot this release reads.
var ErrUnknownSnapshot = errors.New("not a lease store snapshot this release reads")

// Snapshot writes the whole state to w. It encodes under the store's lock
// into memory and writes outside it, so a slow writer does not stall
// grants; the lock is held for the encoding alone. The buffer starts at
// the last snapshot's size and an eighth: grown from 64 KiB by doubling,
// its copies were half the time under the lock at the default caps
// (BenchmarkSnapshotAtDefaultCaps, 53 MiB: 443-550 ms grown, 137-281 ms
// sized). A replica's first snapshot, with no size before it, still grows.
func (s *Store) Snapshot(w io.Writer) error {
	s.mu.Lock()
	b := s.st.encode(make([]byte, 0, max(1<<16, s.snapshotSize+s.snapshotSize/8)), s.writes.SnapshotFormat)
	s.snapshotSize = len(b)
	s.mu.Unlock()
	_, err := w.Write(b)
	return err
}

// Restore replaces the whole state with the snapshot r holds. The store
// keeps its configuration; waiting acquires are woken.
func (s *Store) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("reading a snapshot: %w", err)
	}
	fresh := newState(s.cfg)
	if err := fresh.decode(b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh.wake = s.st.wake
	s.st = fresh
	s.snapshotSize = len(b)
	s.st.wake.broadcast()
	return nil
}

// encode appends the state's snapshot in the given format to b: format 1
// leaves the site bans out, for a group with a replica that reads no more
// (Store.WriteFor).
func (st *state) encode(b []byte, format uint64) []byte {
	w := fieldWriter{b: append(b, snapshotMagic...)}
	w.uint(format)
	t := st.term
	w.bool(t.leading)
	w.uint(t.epoch)
	w.uint(t.serial)
	w.time(t.recoverUntil)
	w.bool(t.recovering)
	w.time(t.horizon)
	w.bool(t.unbounded)
	w.time(st.lastRelease)
	namespaces := slices.Sorted(maps.Keys(st.byNamespace))
	w.uint(uint64(len(namespaces)))
	for _, ns := range namespaces {
		w.string(ns)
	}
	keys := slices.SortedFunc(maps.Keys(st.proxies), compareNames)
	w.uint(uint64(len(keys)))
	for _, k := range keys {
		p := st.proxies[k]
		w.proxyInfo(p.info)
		w.time(p.lastReleased)
		w.bool(p.isReady)
		w.uint(uint64(len(p.slots)))
	}
	encodeRules(&w, st.rules)
	encodeBudgets(&w, st.budgets)
	w.uint(uint64(len(st.expiries)))
	for _, l := range st.expiries {
		w.token(tokenOf(l))
		w.string(l.requestID)
		w.int(int64(l.state))
		w.int(l.reportedOK)
		w.int(l.reportedBytes)
	}
	encodeTiers(&w, st.tiers)
	w.uint(uint64(len(st.cooldowns.heap)))
	for _, c := range st.cooldowns.heap {
		w.name(c.key.proxy)
		w.string(c.key.domain)
		w.int(int64(c.strikes))
		w.time(c.until)
		w.time(c.forgetAt)
		w.bool(c.inForce)
	}
	encodeTally(&w, st.tally)
	encodeDemand(&w, st.demand)
	w.uint(uint64(st.sessions.lru.Len()))
	for e := st.sessions.lru.Front(); e != nil; e = e.Next() {
		sess := e.Value.(*session)
		w.sessionKey(sess.key)
		w.name(sess.proxy)
		w.time(sess.lastUsed)
	}
	encodeStates(&w, st.states)
	if format >= 2 {
		encodeSiteBans(&w, st.siteBans) // sitebans.go
	}
	return w.b
}

func compareNames(a, b ObjectName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

func encodeRules(w *fieldWriter, r *rules) {
	namespaces := slices.Sorted(maps.Keys(r.policies))
	w.uint(uint64(len(namespaces)))
	for _, ns := range namespaces {
		w.uint(uint64(len(r.policies[ns])))
		for _, p := range r.policies[ns] {
			w.crawlPolicy(*p)
		}
	}
	keys := slices.SortedFunc(maps.Keys(r.counts), compareBudgetKeys)
	w.uint(uint64(len(keys)))
	for _, k := range keys {
		c := r.counts[k]
		w.budgetKey(k)
		w.int(c.inUse)
		w.int(c.waited)
		w.int(c.refused)
		w.outcomes(c.outcomes)
		w.bool(c.tiers != nil)
		w.uint(uint64(len(c.tiers)))
		for _, tc := range c.tiers {
			w.int(tc.grants)
			w.outcomes(tc.outcomes)
		}
	}
}

func compareBudgetKeys(a, b budgetKey) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.policy, b.policy), cmp.Compare(a.rule, b.rule), cmp.Compare(a.domain, b.domain))
}

func encodeBudgets(w *fieldWriter, bs *budgets) {
	keys := slices.SortedFunc(maps.Keys(bs.budgets), compareBudgetKeys)
	w.uint(uint64(len(keys)))
	for _, k := range keys {
		b := bs.budgets[k]
		w.budgetKey(k)
		w.limits(b.limits)
		w.int(int64(b.inUse))
		w.time(b.last)
		w.bool(b.lastOn != nil)
		proxies := slices.SortedFunc(maps.Keys(b.lastOn), compareNames)
		w.uint(uint64(len(proxies)))
		for _, p := range proxies {
			w.name(p)
			w.time(b.lastOn[p])
		}
		w.int(int64(b.pruneAt))
	}
	namespaces := slices.Sorted(maps.Keys(bs.domains))
	w.uint(uint64(len(namespaces)))
	for _, ns := range namespaces {
		nd := bs.domains[ns]
		w.string(ns)
		w.int(int64(nd.count))
		w.uint(uint64(len(nd.idle)))
		for _, b := range nd.idle {
			w.budgetKey(b.key)
		}
	}
}

func encodeTiers(w *fieldWriter, ts *tiers) {
	// The named rules' states by key, then each namespace's default-rule
	// states from the most recently used.
	var named []budgetKey
	for k := range ts.entries {
		if k.domain == "" {
			named = append(named, k)
		}
	}
	slices.SortFunc(named, compareBudgetKeys)
	w.uint(uint64(len(named)))
	for _, k := range named {
		encodeTierEntry(w, ts.entries[k])
	}
	namespaces := slices.Sorted(maps.Keys(ts.lru))
	w.uint(uint64(len(namespaces)))
	for _, ns := range namespaces {
		w.string(ns)
		w.uint(uint64(ts.lru[ns].Len()))
		for e := ts.lru[ns].Front(); e != nil; e = e.Next() {
			encodeTierEntry(w, e.Value.(*tierEntry))
		}
	}
}

func encodeTierEntry(w *fieldWriter, e *tierEntry) {
	w.budgetKey(e.key)
	b, _ := e.state.AppendBinary(nil)
	w.string(string(b))
	w.int(e.grants)
}

func encodeTally(w *fieldWriter, t *tally) {
	pools := slices.SortedFunc(maps.Keys(t.pools), compareNames)
	w.uint(uint64(len(pools)))
	for _, k := range pools {
		w.name(k)
		w.outcomes(*t.pools[k])
	}
	proxies := slices.SortedFunc(maps.Keys(t.burns), compareNames)
	w.uint(uint64(len(proxies)))
	for _, k := range proxies {
		b := t.burns[k]
		w.name(k)
		w.int(b.served)
		w.bool(b.bannedAt != nil)
		domains := slices.Sorted(maps.Keys(b.bannedAt))
		w.uint(uint64(len(domains)))
		for _, d := range domains {
			w.string(d)
			w.time(b.bannedAt[d])
		}
	}
}

func encodeDemand(w *fieldWriter, d *demand) {
	w.uint(uint64(d.next))
	var used []int
	for i := range d.refusals {
		if !d.refusals[i].at.IsZero() {
			used = append(used, i)
		}
	}
	w.uint(uint64(len(used)))
	for _, i := range used {
		r := &d.refusals[i]
		w.uint(uint64(i))
		w.string(r.namespace)
		w.string(r.holder)
		w.string(selectorString(r.selector))
		w.time(r.at)
	}
}

func encodeStates(w *fieldWriter, st *sessionStates) {
	w.uint(uint64(st.lru.Len()))
	for e := st.lru.Front(); e != nil; e = e.Next() {
		se := e.Value.(*stateEntry)
		w.stateKey(se.key)
		w.string(string(se.blob))
	}
	// Each owner's own order, by the entries' places in the order above.
	owners := slices.Sorted(maps.Keys(st.owners))
	w.uint(uint64(len(owners)))
	index := map[stateKey]int{}
	i := 0
	for e := st.lru.Front(); e != nil; e, i = e.Next(), i+1 {
		index[e.Value.(*stateEntry).key] = i
	}
	for _, o := range owners {
		w.string(o)
		w.uint(uint64(st.owners[o].lru.Len()))
		for e := st.owners[o].lru.Front(); e != nil; e = e.Next() {
			w.uint(uint64(index[e.Value.(*stateEntry).key]))
		}
	}
}

// decode fills an empty state from a snapshot.
func (st *state) decode(b []byte) error {
	if !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return fmt.Errorf("%w: no magic", ErrUnknownSnapshot)
	}
	r := fieldReader{b: b[len(snapshotMagic):]}
	format := r.uint()
	if format != 1 && format != SnapshotFormat {
		return fmt.Errorf("%w: format %d, this release reads 1 and %d", ErrUnknownSnapshot, format, SnapshotFormat)
	}
	st.term = term{leading: r.bool(), epoch: r.uint(), serial: r.uint(), recoverUntil: r.time(), recovering: r.bool(),
		horizon: r.time(), unbounded: r.bool()}
	st.lastRelease = r.time()
	for range r.count() {
		st.byNamespace[r.string()] = &selectionOrder{byNamespace: true}
	}
	for range r.count() {
		info := r.proxyInfo()
		p := &proxyState{info: info, urlHash: urlHash(info.URL), lastReleased: r.time(), isReady: r.bool()}
		p.slots = make([]*lease, r.count())
		st.proxies[info.Key] = p
	}
	decodeRules(&r, st.rules)
	decodeBudgets(&r, st.budgets)
	st.decodeLeases(&r)
	decodeTiers(&r, st.tiers)
	for range r.count() {
		c := &cooldown{key: cooldownKey{proxy: r.name(), domain: r.string()}, strikes: int(r.int()), until: r.time(), forgetAt: r.time(), inForce: r.bool()}
		st.cooldowns.restore(c)
	}
	decodeTally(&r, st.tally)
	decodeDemand(&r, st.demand)
	for range r.count() {
		key, proxy, at := r.sessionKey(), r.name(), r.time()
		sess := &session{key: key, proxy: proxy, lastUsed: at}
		sess.elem = st.sessions.lru.PushBack(sess)
		st.sessions.byKey[key] = sess
	}
	decodeStates(&r, st.states)
	if format >= 2 {
		decodeSiteBans(&r, st.siteBans)
	}
	if r.err != nil {
		return fmt.Errorf("%w: %w", ErrUnknownSnapshot, r.err)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes left over", ErrUnknownSnapshot, len(r.b))
	}
	for _, p := range st.proxies {
		st.relist(p, false)
	}
	st.publish()
	return nil
}

// decodeLeases reads the leases in their heap's order and installs the
// live ones in their slots, charged to the budgets already restored.
func (st *state) decodeLeases(r *fieldReader) {
	for range r.count() {
		l := leaseOf(r.token())
		l.requestID = r.string()
		l.state, l.reportedOK, l.reportedBytes = leaseState(r.int()), r.int(), r.int()
		l.index = len(st.expiries)
		st.expiries = append(st.expiries, l)
		st.leases[l.key] = l
		if l.state != stateLive {
			continue
		}
		p := st.proxies[l.proxyKey]
		if p == nil || int(l.slot) >= len(p.slots) {
			r.fail("lease slot")
			return
		}
		l.proxy = p
		p.slots[l.slot] = l
		if l.requestID != "" {
			st.requests.byID[requestKey{l.owner, l.requestID}] = l.key
		}
		p.held++
		st.live++
		if l.owner != "" {
			st.owned[l.owner]++
		}
		if key, _, ok := st.rules.match(l.proxyKey.Namespace, l.domain); ok {
			l.budget = st.budgets.budgets[key]
		}
	}
}

func decodeRules(r *fieldReader, rs *rules) {
	for range r.count() {
		for range r.count() {
			p := r.crawlPolicy()
			rs.policies[p.Key.Namespace] = append(rs.policies[p.Key.Namespace], &p)
		}
	}
	for range r.count() {
		k := r.budgetKey()
		c := &ruleCounts{inUse: r.int(), waited: r.int(), refused: r.int(), outcomes: r.outcomes()}
		hasTiers, n := r.bool(), r.count()
		if hasTiers {
			c.tiers = make([]tierCounts, n)
		}
		for i := range n {
			grants, outcomes := r.int(), r.outcomes()
			if hasTiers {
				c.tiers[i] = tierCounts{grants: grants, outcomes: outcomes}
			}
		}
		rs.counts[k] = c
	}
	n := 0
	for _, ps := range rs.policies {
		if slices.ContainsFunc(ps, func(p *CrawlPolicy) bool { return p.Default != nil }) {
			n++
		}
	}
	rs.withDefault = n
}

func decodeBudgets(r *fieldReader, bs *budgets) {
	for range r.count() {
		k := r.budgetKey()
		b := &budget{key: k, limits: r.limits(), inUse: int(r.int()), last: r.time(), counts: bs.rules.countsOf(k), idleAt: -1}
		hasLastOn, n := r.bool(), r.count()
		if hasLastOn {
			b.lastOn = make(map[ObjectName]time.Time, n)
		}
		for range n {
			p, at := r.name(), r.time()
			if hasLastOn {
				b.lastOn[p] = at
			}
		}
		b.pruneAt = int(r.int())
		bs.budgets[k] = b
	}
	for range r.count() {
		ns := r.string()
		nd := &namespaceDomains{count: int(r.int())}
		for range r.count() {
			b := bs.budgets[r.budgetKey()]
			if b == nil {
				r.fail("idle budget")
				return
			}
			b.idleAt = len(nd.idle)
			nd.idle = append(nd.idle, b)
		}
		bs.domains[ns] = nd
		bs.domainTotal += nd.count
	}
}

func decodeTiers(r *fieldReader, ts *tiers) {
	for range r.count() {
		e := decodeTierEntry(r)
		ts.entries[e.key] = e
	}
	for range r.count() {
		ns := r.string()
		lru := list.New()
		for range r.count() {
			e := decodeTierEntry(r)
			e.elem = lru.PushBack(e)
			ts.entries[e.key] = e
			ts.domainTotal++
		}
		ts.lru[ns] = lru
	}
	for _, ps := range ts.rules.policies {
		for _, p := range ps {
			if len(p.Tiers) > 0 {
				ts.tiered++
			}
		}
	}
}

func decodeTierEntry(r *fieldReader) *tierEntry {
	e := &tierEntry{key: r.budgetKey()}
	if err := e.state.UnmarshalBinary([]byte(r.string())); err != nil {
		r.fail("tier state")
	}
	e.grants = r.int()
	return e
}

func decodeTally(r *fieldReader, t *tally) {
	for range r.count() {
		k, o := r.name(), r.outcomes()
		t.pools[k] = &o
	}
	for range r.count() {
		k := r.name()
		b := &burn{served: r.int()}
		hasBans, n := r.bool(), r.count()
		if hasBans {
			b.bannedAt = make(map[string]time.Time, n)
		}
		for range n {
			d, at := r.string(), r.time()
			if hasBans {
				b.bannedAt[d] = at
			}
		}
		t.burns[k] = b
	}
}

func decodeDemand(r *fieldReader, d *demand) {
	d.next = int(r.uint()) % refusalRing
	for range r.count() {
		i := r.uint()
		ns, holder, sel, at := r.string(), r.string(), r.selector(), r.time()
		if i >= refusalRing {
			r.fail("refusal")
			return
		}
		d.refusals[i] = refusedAcquire{demandKey: demandKey{namespace: ns, selector: sel, holder: holder}, at: at}
	}
}

func decodeStates(r *fieldReader, st *sessionStates) {
	var order []*stateEntry
	for range r.count() {
		k := r.stateKey()
		blob := []byte(r.string())
		e := &stateEntry{key: k, blob: blob, cost: k.cost(blob)}
		e.all = st.lru.PushBack(e)
		st.byKey[k] = e
		st.bytes += e.cost
		order = append(order, e)
	}
	for range r.count() {
		own := &ownerStates{lru: list.New()}
		st.owners[r.string()] = own
		for range r.count() {
			i := r.uint()
			if i >= uint64(len(order)) {
				r.fail("state entry")
				return
			}
			e := order[i]
			e.mine = own.lru.PushBack(e)
			own.bytes += e.cost
		}
	}
}

// restore puts a cool-down read from a snapshot back, in the heap's order.
func (c *cooldowns) restore(cd *cooldown) {
	pc := c.byProxy[cd.key.proxy]
	if pc == nil {
		pc = &proxyCooldowns{byDomain: map[string]*cooldown{}}
		c.byProxy[cd.key.proxy] = pc
	}
	pc.byDomain[cd.key.domain] = cd
	cd.index = len(c.heap)
	c.heap = append(c.heap, cd)
	if cd.inForce {
		pc.inForce++
		c.inForce++
	}
}

// publish sets every gauge of the metrics from the state, after a restore.
func (st *state) publish() {
	st.metrics.SetActiveLeases(st.live)
	st.metrics.SetCooldowns(st.cooldowns.inForce)
	st.metrics.SetRecovering(st.term.recovering)
	setStateEntries(st.metrics, StateCooldowns, len(st.cooldowns.heap))
	setStateEntries(st.metrics, StateSessions, len(st.sessions.byKey))
	setStateEntries(st.metrics, StateDomainBudgets, st.budgets.domainTotal)
	setStateEntries(st.metrics, StateTiers, st.tiers.domainTotal)
	setStateEntries(st.metrics, StateSessionStates, len(st.states.byKey))
	setStateEntries(st.metrics, StateSiteBans, st.siteBans.entries)
}
