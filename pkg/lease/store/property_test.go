package store

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"
)

// The property test drives a store through random interleavings of acquire,
// renew, release, clock steps (expiry) and proxy changes (health flips,
// deletion, recreation, maxLeases, URL, labels, latency), beside a model of
// what every caller was told. After every step:
//   - no proxy is held by more live leases than its maxLeases, and a proxy
//     that is not Ready is held by none;
//   - the store's live leases are exactly the model's, each expiring exactly
//     one TTL after its last grant or renewal (none outlives its TTL);
//   - renew and release answer as the model predicts: an expired or
//     released lease is unknown, a revoked one gone;
//   - the store's own structures are consistent (heap, slots, counts).

const (
	propertySeeds = 200
	propertySteps = 300
)

func TestStoreProperties(t *testing.T) {
	seeds, steps := propertySeeds, propertySteps
	if testing.Short() {
		seeds = 20
	}
	for seed := range uint64(seeds) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			runStoreProperties(t, seed, steps)
		})
	}
}

type modelState int

const (
	modelLive modelState = iota
	modelReleased
	modelRevoked
)

type modelLease struct {
	ids       []string
	holder    string
	proxy     ObjectName
	slot      int32
	ttl       time.Duration
	expiresAt time.Time
	domain    string
	// session and scope are the acquire's Session and Namespace.
	session, scope string
	state          modelState
}

func (l *modelLease) live(now time.Time) bool { return l.state == modelLive && now.Before(l.expiresAt) }

type model struct {
	t       *testing.T
	rng     *rand.Rand
	clk     *clocktesting.FakeClock
	s       *Store
	metrics *storetest.Metrics
	proxies map[ObjectName]*ProxyInfo // nil value: removed
	leases  []*modelLease
	holders int
	uids    int
	// readySince numbers Ready transitions.
	readySince int
	log        []string
}

func runStoreProperties(t *testing.T, seed uint64, steps int) {
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), proxies: map[ObjectName]*ProxyInfo{}}
	var infos []ProxyInfo
	for i := range 5 {
		ns := testNamespace
		if i%3 == 2 {
			ns = "other"
		}
		p := newProxy("p"+strconv.Itoa(i), inNamespace(ns), withMaxLeases(int32(1+m.rng.IntN(3))),
			withLatency(int64(m.rng.IntN(50))), withLabels("tier", []string{"a", "b"}[m.rng.IntN(2)]))
		infos = append(infos, p)
		m.proxies[p.Key] = &p
	}
	m.s, m.clk, m.metrics = newTestStore(t, infos)

	type op struct {
		weight int
		run    func()
	}
	ops := []op{
		{30, m.acquire},
		{20, m.renew},
		{15, m.release},
		{15, m.step},
		{5, m.flipHealth},
		{3, m.removeOrRestore},
		{4, m.changeMaxLeases},
		{2, m.changeURL},
		{3, m.changeLabelsOrLatency},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for range steps {
		n := m.rng.IntN(total)
		for _, o := range ops {
			if n < o.weight {
				o.run()
				break
			}
			n -= o.weight
		}
		m.check()
		if t.Failed() {
			t.Logf("seed %d, steps:\n%s", seed, joinLast(m.log, 40))
			return
		}
	}
}

func joinLast(lines []string, n int) string {
	out := ""
	for _, l := range lines[max(0, len(lines)-n):] {
		out += "  " + l + "\n"
	}
	return out
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%v ", m.clk.Now().Sub(t0))+fmt.Sprintf(format, args...))
}

func (m *model) now() time.Time { return m.clk.Now() }

func (m *model) pick(options ...string) string { return options[m.rng.IntN(len(options))] }

func (m *model) liveOn(key ObjectName) []*modelLease {
	var out []*modelLease
	for _, l := range m.leases {
		if l.proxy == key && l.live(m.now()) {
			out = append(out, l)
		}
	}
	return out
}

func capacityOf(p *ProxyInfo) int { return min(max(1, int(p.MaxLeases)), maxSlots) }

func (m *model) acquire() {
	m.holders++
	req := AcquireRequest{
		Holder:    "h" + strconv.Itoa(m.holders),
		Namespace: m.pick("", "", testNamespace, "other"),
		Domain:    m.pick("", "", "d1.example", "d2.example"),
		Session:   m.pick("", "", "s1", "s2"),
		TTL:       []time.Duration{0, 5 * time.Second, 30 * time.Second, 2 * time.Minute}[m.rng.IntN(4)],
	}
	selector := m.pick("", "", "tier=a")
	req.Selector, _ = labels.Parse(selector)
	// Which proxies could take it, as far as capacity goes.
	var fits []ObjectName
	for key, p := range m.proxies {
		if p != nil && p.Ready && (req.Namespace == "" || key.Namespace == req.Namespace) &&
			req.Selector.Matches(labels.Set(p.Labels)) && len(m.liveOn(key)) < capacityOf(p) {
			fits = append(fits, key)
		}
	}
	l, err := m.s.Acquire(m.t.Context(), req)
	m.logf("acquire ns=%q sel=%q domain=%q session=%q ttl=%v: %s %v", req.Namespace, selector, req.Domain, req.Session, req.TTL, l.Proxy.Key, err)
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if joined := m.joined(req, l, err); joined != nil {
		// The session's live lease, extended when the TTL asks for more.
		if want := m.now().Add(ttl); want.After(joined.expiresAt) {
			joined.expiresAt, joined.ttl = want, ttl
		}
		if !l.ExpiresAt.Equal(joined.expiresAt) {
			m.t.Errorf("joined %s's lease until %v, want %v", joined.holder, l.ExpiresAt, joined.expiresAt)
		}
		joined.ids = append(joined.ids, l.ID)
		return
	}
	switch {
	case err == nil:
		if !slices.Contains(fits, l.Proxy.Key) {
			m.t.Errorf("granted %s, which has no free capacity for the request (fits: %v)", l.Proxy.Key, fits)
		}
		for _, other := range m.liveOn(l.Proxy.Key) {
			if other.slot == l.Slot {
				m.t.Errorf("granted slot %d of %s, which %s holds", l.Slot, l.Proxy.Key, other.holder)
			}
		}
		if want := m.now().Add(ttl); !l.ExpiresAt.Equal(want) || l.TTL != ttl {
			m.t.Errorf("granted until %v (TTL %v), want %v (TTL %v)", l.ExpiresAt, l.TTL, want, ttl)
		}
		m.leases = append(m.leases, &modelLease{ids: []string{l.ID}, holder: req.Holder, proxy: l.Proxy.Key, slot: l.Slot,
			ttl: ttl, expiresAt: l.ExpiresAt, domain: req.Domain, session: req.Session, scope: req.Namespace})
	case len(fits) == 0:
		if !errors.Is(err, ErrNoneFree) {
			m.t.Errorf("acquire with nothing free: err = %v, want ErrNoneFree", err)
		}
	case req.Domain != "" && errors.Is(err, ErrCoolingDown):
		// Everything that fits may be cooling down for the domain.
	default:
		m.t.Errorf("acquire failed with %v, though %v had room", err, fits)
	}
}

// joined is the live lease of req's session that a granted l is (an acquire
// with a session joins its session's live lease), nil for a new grant.
func (m *model) joined(req AcquireRequest, l Lease, err error) *modelLease {
	if err != nil || req.Session == "" {
		return nil
	}
	for _, o := range m.liveOn(l.Proxy.Key) {
		if o.slot == l.Slot && o.session == req.Session && o.scope == req.Namespace {
			return o
		}
	}
	return nil
}

func (m *model) someLease() *modelLease {
	if len(m.leases) == 0 {
		return nil
	}
	// Favour recent leases: most old ones are long over.
	i := len(m.leases) - 1 - min(len(m.leases)-1, int(m.rng.ExpFloat64()*8))
	return m.leases[i]
}

func (m *model) renew() {
	l := m.someLease()
	if l == nil {
		return
	}
	id := l.ids[m.rng.IntN(len(l.ids))] // any ID of the lease names it on this leader
	ttl := []time.Duration{0, 10 * time.Second, 45 * time.Second, DefaultMaxTTL + time.Second}[m.rng.IntN(4)]
	got, err := m.s.RenewAs("", id, ttl, Report{})
	m.logf("renew %s@%s ttl=%v: %v", l.holder, l.proxy, ttl, err)
	now := m.now()
	var field *FieldError
	switch {
	case ttl > DefaultMaxTTL:
		if !errors.As(err, &field) {
			m.t.Errorf("renew with TTL %v: err = %v, want a FieldError", ttl, err)
		}
	case l.live(now):
		if err != nil {
			m.t.Errorf("renew of the live lease of %s: %v", l.holder, err)
			return
		}
		if ttl != 0 {
			l.ttl = ttl
		}
		l.expiresAt = now.Add(l.ttl)
		l.ids = append(l.ids, got.ID)
		if !got.ExpiresAt.Equal(l.expiresAt) || got.Slot != l.slot || got.Proxy.Key != l.proxy {
			m.t.Errorf("renewed %+v, want until %v on %s slot %d", got, l.expiresAt, l.proxy, l.slot)
		}
	case l.state == modelRevoked && now.Before(l.expiresAt):
		if !errors.Is(err, ErrRevoked) {
			m.t.Errorf("renew of the revoked lease of %s: err = %v, want ErrRevoked", l.holder, err)
		}
	default:
		if !errors.Is(err, ErrUnknownLease) {
			m.t.Errorf("renew of the ended lease of %s (expired %v ago): err = %v, want ErrUnknownLease", l.holder, now.Sub(l.expiresAt), err)
		}
	}
}

func (m *model) release() {
	l := m.someLease()
	if l == nil {
		return
	}
	outcome := Outcome(m.pick("ok", "banned", "error"))
	domain := m.pick("", "d1.example")
	err := m.s.ReleaseAs("", l.ids[len(l.ids)-1], outcome, domain, Report{})
	m.logf("release %s@%s %s domain=%q: %v", l.holder, l.proxy, outcome, domain, err)
	now := m.now()
	var field *FieldError
	switch {
	case outcome == OutcomeBanned && domain == "" && l.domain == "":
		if !errors.As(err, &field) {
			m.t.Errorf("banned release without a domain: err = %v, want a FieldError", err)
		}
	case l.live(now):
		if err != nil {
			m.t.Errorf("release of the live lease of %s: %v", l.holder, err)
		}
		l.state = modelReleased
	case l.state == modelRevoked && now.Before(l.expiresAt):
		if err != nil {
			m.t.Errorf("release of the revoked lease of %s: %v", l.holder, err)
		}
		// One grant counts one outcome: a second release is unknown.
		l.state = modelReleased
	default:
		if !errors.Is(err, ErrUnknownLease) {
			m.t.Errorf("release of the ended lease of %s: err = %v, want ErrUnknownLease", l.holder, err)
		}
	}
}

func (m *model) step() {
	d := []time.Duration{0, time.Second, 5 * time.Second, 20 * time.Second, 59 * time.Second, 61 * time.Second, 2 * time.Minute}[m.rng.IntN(7)]
	m.clk.Step(d)
	m.logf("step %v", d)
}

func (m *model) someProxy() (ObjectName, *ProxyInfo) {
	keys := make([]ObjectName, 0, len(m.proxies))
	for k := range m.proxies {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ObjectName) int { return cmp.Compare(a.String(), b.String()) })
	k := keys[m.rng.IntN(len(keys))]
	return k, m.proxies[k]
}

// revoke marks the live leases of key from slot keep on as revoked.
func (m *model) revoke(key ObjectName, keep int32) {
	for _, l := range m.liveOn(key) {
		if l.slot >= keep {
			l.state = modelRevoked
		}
	}
}

func (m *model) upsert(p ProxyInfo) {
	m.s.Upsert(p)
	m.proxies[p.Key] = &p
}

func (m *model) flipHealth() {
	key, p := m.someProxy()
	if p == nil {
		return
	}
	next := *p
	next.Ready = !p.Ready
	if next.Ready {
		m.readySince++
		next.ReadySince = t0.Add(time.Duration(m.readySince)) // unique, as a condition's transition time is
	} else {
		m.revoke(key, 0)
	}
	m.upsert(next)
	m.logf("%s Ready=%v", key, next.Ready)
}

func (m *model) removeOrRestore() {
	key, p := m.someProxy()
	if p != nil {
		m.revoke(key, 0)
		m.s.Remove(key)
		m.proxies[key] = nil
		m.logf("%s removed", key)
		return
	}
	m.uids++
	restored := newProxy(key.Name, inNamespace(key.Namespace), withUID("uid-"+strconv.Itoa(m.uids)), withMaxLeases(int32(1+m.rng.IntN(3))))
	m.upsert(restored)
	m.logf("%s recreated", key)
}

func (m *model) changeMaxLeases() {
	key, p := m.someProxy()
	if p == nil {
		return
	}
	next := *p
	next.MaxLeases = int32(m.rng.IntN(4)) // 0 means 1
	if !next.Ready {
		m.revoke(key, 0)
	} else {
		m.revoke(key, int32(capacityOf(&next)))
	}
	m.upsert(next)
	m.logf("%s maxLeases=%d", key, next.MaxLeases)
}

func (m *model) changeURL() {
	key, p := m.someProxy()
	if p == nil {
		return
	}
	next := *p
	next.URL = "http://127.0.0." + strconv.Itoa(1+m.rng.IntN(200)) + ":3128"
	if next.URL != p.URL || !next.Ready {
		m.revoke(key, 0)
	}
	m.upsert(next)
	m.logf("%s url=%s", key, next.URL)
}

func (m *model) changeLabelsOrLatency() {
	key, p := m.someProxy()
	if p == nil {
		return
	}
	next := *p
	next.Labels = map[string]string{"tier": m.pick("a", "b")}
	next.LatencyMillis = int64(m.rng.IntN(50))
	if !next.Ready {
		m.revoke(key, 0)
	}
	m.upsert(next)
	m.logf("%s labels=%v latency=%d", key, next.Labels, next.LatencyMillis)
}

type listedLease struct {
	Holder    string
	Proxy     string
	Slot      int32
	ExpiresAt time.Time
}

func (m *model) check() {
	now := m.now()
	// Capacity, as callers were told.
	for key, p := range m.proxies {
		live := m.liveOn(key)
		switch {
		case p == nil || !p.Ready:
			if len(live) > 0 {
				m.t.Errorf("%s is not Ready but held by %d live leases", key, len(live))
			}
		case len(live) > capacityOf(p):
			m.t.Errorf("%s is held by %d live leases, maxLeases %d", key, len(live), capacityOf(p))
		}
	}
	// The store agrees with the model, and no lease outlives its TTL.
	var want []listedLease
	for _, l := range m.leases {
		if l.live(now) {
			want = append(want, listedLease{l.holder, l.proxy.String(), l.slot, l.expiresAt})
		}
	}
	leases, err := m.s.List(LeaseFilter{})
	if err != nil {
		m.t.Fatal(err)
	}
	var got []listedLease
	for _, l := range leases {
		got = append(got, listedLease{l.Holder, l.Proxy.Key.String(), l.Slot, l.ExpiresAt})
		if !l.ExpiresAt.After(now) || l.ExpiresAt.Sub(now) > l.TTL || l.TTL > DefaultMaxTTL {
			m.t.Errorf("lease of %s expires %v from now with TTL %v", l.Holder, l.ExpiresAt.Sub(now), l.TTL)
		}
	}
	byHolder := func(a, b listedLease) int { return cmp.Compare(a.Holder, b.Holder) }
	slices.SortFunc(want, byHolder)
	slices.SortFunc(got, byHolder)
	if diff := gocmp.Diff(want, got); diff != "" {
		m.t.Errorf("live leases (-model +store):\n%s", diff)
	}
	if active := m.metrics.Snapshot().Active; active != len(want) {
		m.t.Errorf("active leases metric = %d, want %d", active, len(want))
	}
	if err := m.s.checkConsistency(); err != nil {
		m.t.Errorf("store structures: %v", err)
	}
}

// checkConsistency verifies the store's internal structures.
func (s *Store) checkConsistency() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.checkConsistency()
}

func (st *state) checkConsistency() error {
	var errs []error
	for i, l := range st.expiries {
		if l.index != i {
			errs = append(errs, fmt.Errorf("lease %v at heap position %d thinks it is at %d", l.key, i, l.index))
		}
		if i > 0 && st.expiries[i].expiresAt.Before(st.expiries[(i-1)/2].expiresAt) {
			errs = append(errs, fmt.Errorf("heap order broken at %d", i))
		}
		if st.leases[l.key] != l {
			errs = append(errs, fmt.Errorf("lease %v is in the heap but not the map", l.key))
		}
	}
	if len(st.expiries) != len(st.leases) {
		errs = append(errs, fmt.Errorf("%d leases in the heap, %d in the map", len(st.expiries), len(st.leases)))
	}
	live := 0
	for _, l := range st.leases {
		if l.state == stateLive {
			live++
			if l.proxy == nil || l.proxy.occupant(l.slot) != l {
				errs = append(errs, fmt.Errorf("live lease %v is not in its slot", l.key))
			}
		}
	}
	if live != st.live {
		errs = append(errs, fmt.Errorf("%d live leases, counted %d", live, st.live))
	}
	ready := 0
	for key, p := range st.proxies {
		held := 0
		for _, l := range p.slots {
			if l != nil {
				held++
			}
		}
		if held != p.held || held > p.capacity() {
			errs = append(errs, fmt.Errorf("%s: %d slots taken, held %d, capacity %d", key, held, p.held, p.capacity()))
		}
		if p.info.Ready != p.ready() {
			errs = append(errs, fmt.Errorf("%s: Ready %v but ready() %v", key, p.info.Ready, p.ready()))
		}
		// The selection orders hold exactly the Ready proxies with a free slot.
		if want := p.ready() && p.free(); p.listed() != want || p.nsLinks.in != want {
			errs = append(errs, fmt.Errorf("%s: Ready %v, free %v, but in the order %v, in its namespace's %v", key, p.ready(), p.free(), p.listed(), p.nsLinks.in))
		}
		if p.listed() {
			ready++
		}
		if !p.info.Ready && held > 0 {
			errs = append(errs, fmt.Errorf("%s is not Ready but holds %d leases", key, held))
		}
	}
	orders := map[string]*selectionOrder{"": st.order}
	inNamespaces := 0
	for ns, o := range st.byNamespace {
		orders[ns] = o
		inNamespaces += o.n
	}
	if st.order.n != ready || inNamespaces != ready {
		errs = append(errs, fmt.Errorf("%d Ready proxies with a free slot, %d in the order, %d in the namespaces' orders", ready, st.order.n, inNamespaces))
	}
	for ns, o := range orders {
		n := 0
		for p := o.front; p != nil; p = o.next(p) {
			n++
			if next := o.next(p); next != nil && selectedBefore(next, p) {
				errs = append(errs, fmt.Errorf("the selection order %q is not sorted", ns))
			}
			if ns != "" && p.info.Key.Namespace != ns {
				errs = append(errs, fmt.Errorf("%s is in the order of namespace %q", p.info.Key, ns))
			}
		}
		if n != o.n {
			errs = append(errs, fmt.Errorf("the selection order %q links %d proxies, counts %d", ns, n, o.n))
		}
	}
	return errors.Join(append(errs, st.checkTiers())...)
}

// checkTiers: the default rule's tier states are each in their
// namespace's LRU and counted once; none beyond the namespace's share.
func (st *state) checkTiers() error {
	var errs []error
	ts := st.tiers
	inLists := 0
	for ns, lru := range ts.lru {
		inLists += lru.Len()
		if lru.Len() > st.rules.share() {
			errs = append(errs, fmt.Errorf("namespace %s keeps %d tier states, over its share %d", ns, lru.Len(), st.rules.share()))
		}
		for e := lru.Front(); e != nil; e = e.Next() {
			if te := e.Value.(*tierEntry); ts.entries[te.key] != te || te.key.namespace != ns {
				errs = append(errs, fmt.Errorf("tier state %v is in namespace %s's list but not the map", te.key, ns))
			}
		}
	}
	domains := 0
	for k, e := range ts.entries {
		if (k.domain != "") != (e.elem != nil) {
			errs = append(errs, fmt.Errorf("tier state %v: in a list %v", k, e.elem != nil))
		}
		if k.domain != "" {
			domains++
		}
	}
	if inLists != ts.domainTotal || domains != ts.domainTotal {
		errs = append(errs, fmt.Errorf("%d default-rule tier states in lists, %d in the map, counted %d", inLists, domains, ts.domainTotal))
	}
	return errors.Join(errs...)
}
