package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// Each policy on its own, built without a Store: what it admits and what
// its apply points do to its state.

func policyConfig() Config {
	return Config{Key: testKey, CooldownBase: time.Minute, CooldownMax: 4 * time.Minute, CooldownDecay: time.Hour,
		MaxCooldowns: 3, MaxSessions: 2, SessionIdle: time.Hour, MaxDomainBudgets: 2,
		MaxStateBytes: 4000, MaxStateEntries: 10, MaxStateBytesPerOwner: 2000}.withDefaults()
}

// testProxyState is a Ready proxy as the policies see it.
func testProxyState(name string, opts ...proxyOption) *proxyState {
	info := newProxy(name, opts...)
	return &proxyState{info: info, urlHash: urlHash(info.URL), isReady: true}
}

// testLease is a live lease of holder "w" on p for domain.
func testLease(p *proxyState, serial uint64, domain string) *lease {
	return &lease{key: leaseKey{epoch: 1, serial: serial}, proxy: p, proxyKey: p.info.Key, proxyUID: p.info.UID,
		holder: "w", owner: "alice", domain: domain, grantedAt: t0, expiresAt: t0.Add(time.Minute), ttl: time.Minute}
}

func TestCooldownsPolicy(t *testing.T) {
	c := newCooldowns(policyConfig())
	p1, p2 := testProxyState("p1"), testProxyState("p2")
	key := cooldownKey{proxy: p1.info.Key, domain: "shop.example"}

	if c.prepare(AcquireRequest{Domain: "shop.example", site: "shop.example"}, t0, false) {
		t.Errorf("prepared with no cool-down in force: it would ask every proxy for nothing")
	}
	c.ban(key, t0)
	c.ban(key, t0.Add(time.Second)) // a second strike within the memory: two minutes
	if !c.prepare(AcquireRequest{Domain: "shop.example", site: "shop.example"}, t0, false) {
		t.Fatal("not prepared with a cool-down in force")
	}
	if got, want := c.admit(p1), (refusal{reason: ErrCoolingDown, until: t0.Add(time.Second + 2*time.Minute)}); got != want {
		t.Errorf("admit(banned proxy) = %+v, want %+v", got, want)
	}
	if got := c.admit(p2); got.reason != nil {
		t.Errorf("admit(other proxy) = %+v, want admitted", got)
	}
	if e := c.due(t0.Add(time.Minute)); e != nil {
		t.Errorf("due before the end = %v, want nothing", e)
	}
	end := t0.Add(time.Second + 2*time.Minute)
	if e := c.due(end); e != (CooldownLapse{key: key}) {
		t.Fatalf("due at the end = %#v, want its lapse", e)
	}
	c.lapse(key)
	if got := c.coolingFor(p1.info.Key, "shop.example"); got != nil {
		t.Errorf("cooling after the lapse: %+v", got)
	}
	if e := c.due(end.Add(2 * time.Hour)); e != (CooldownDrop{key: key}) {
		t.Fatalf("due after two decay periods = %#v, want its drop", e)
	}
	c.drop(key)
	if len(c.heap) != 0 || len(c.byProxy) != 0 {
		t.Errorf("after the drop: %d entries, %d proxies", len(c.heap), len(c.byProxy))
	}

	// At the cap, a new entry evicts the one whose next event is soonest.
	for i, d := range []string{"a", "b", "c", "d"} {
		c.ban(cooldownKey{proxy: p2.info.Key, domain: d}, t0.Add(time.Duration(i)*time.Second))
	}
	if got := c.coolingFor(p2.info.Key, "a"); got != nil || len(c.heap) != 3 || c.inForce != 3 {
		t.Errorf("after 4 bans at a cap of 3: a kept %v, %d entries, %d in force", got != nil, len(c.heap), c.inForce)
	}
	c.forget(p2.info.Key, true)
	if len(c.heap) != 0 || c.inForce != 0 {
		t.Errorf("a new instance kept %d entries, %d in force", len(c.heap), c.inForce)
	}
}

func TestBudgetsPolicy(t *testing.T) {
	r := newRules(policyConfig())
	b := newBudgets(r, NoMetrics{})
	r.put(&CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Rules: map[string]DomainLimits{
		"shop.example": {MaxConcurrent: 1, MinInterval: 10 * time.Second},
	}})
	p1, p2 := testProxyState("p1"), testProxyState("p2")
	req := &AcquireRequest{Domain: "shop.example"}

	if !b.prepare(*req, t0, false) || b.admit(p1).reason != nil {
		t.Fatal("an unused budget refused a grant")
	}
	l := testLease(p1, 1, "shop.example")
	b.installed(l, install{grant: true, at: t0})
	b.prepare(*req, t0.Add(time.Second), false)
	rule := budgetKey{namespace: testNamespace, policy: "polite", rule: "shop.example"}
	// Both bind; the concurrent lease says "a second", since a release may come first.
	if got, want := b.admit(p2), (refusal{reason: ErrDomainLimited, until: t0.Add(2 * time.Second), rule: rule}); got != want {
		t.Errorf("admit inside the interval = %+v, want %+v", got, want)
	}
	b.ended(l)
	b.prepare(*req, t0.Add(time.Second), false)
	if got, want := b.admit(p2), (refusal{reason: ErrDomainLimited, until: t0.Add(10 * time.Second), rule: rule}); got != want {
		t.Errorf("admit inside the interval, released = %+v, want %+v", got, want)
	}
	l = testLease(p1, 2, "shop.example")
	b.installed(l, install{at: t0}) // relearnt: charged, no grant time
	b.prepare(*req, t0.Add(11*time.Second), false)
	if got := b.admit(p2); got.reason != ErrDomainLimited || got.until != t0.Add(12*time.Second) {
		t.Errorf("admit with the one concurrent lease held = %+v, want limited for a second", got)
	}
	b.ended(l)
	if got := b.admit(p2); got.reason != nil {
		t.Errorf("admit after the release = %+v, want admitted", got)
	}
	if c := r.counts[rule]; c.inUse != 0 {
		t.Errorf("the rule counts %d in use after the release", c.inUse)
	}
	// Another domain no rule matches is not this policy's business.
	if b.prepare(AcquireRequest{Domain: "news.example"}, t0, false) && b.admit(p2).reason != nil {
		t.Errorf("an unmatched domain was refused")
	}
}

func TestDomainBudgetsEvictIdleOnes(t *testing.T) {
	r := newRules(policyConfig()) // MaxDomainBudgets 2
	b := newBudgets(r, NoMetrics{})
	r.put(&CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Default: &DomainLimits{MinInterval: time.Second}})
	p := testProxyState("p1")
	for i, d := range []string{"a.example", "b.example"} {
		l := testLease(p, uint64(i+1), d)
		b.installed(l, install{grant: true, at: t0})
		b.ended(l)
	}
	var emitted []Effect
	emit := func(e Effect) { emitted = append(emitted, e); b.evict(e.(BudgetEvict).key) }
	// Both are pinned by their interval at t0: the third domain is refused.
	err := b.admitDomainBudget(testNamespace, "c.example", t0, emit)
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, ErrDomainBudgetsFull) || len(emitted) != 0 {
		t.Fatalf("a third domain while both budgets are pinned: %v, evicted %v", err, emitted)
	}
	// A second later both are idle: the oldest goes, and the grant may come.
	if err := b.admitDomainBudget(testNamespace, "c.example", t0.Add(time.Second), emit); err != nil {
		t.Fatal(err)
	}
	want := []Effect{BudgetEvict{key: budgetKey{namespace: testNamespace, policy: "polite", rule: DefaultRuleHost, domain: "a.example"}}}
	if diff := cmp.Diff(want, emitted, cmp.AllowUnexported(BudgetEvict{}, budgetKey{})); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
}

func TestTiersPolicy(t *testing.T) {
	r := newRules(policyConfig())
	ts := newTiers(r, NoMetrics{})
	tiering := &Tiering{Names: []string{"cheap", "dear"},
		Selectors: []labels.Selector{labels.SelectorFromSet(labels.Set{"tier": "cheap"}), labels.SelectorFromSet(labels.Set{"tier": "dear"})},
		Config:    tier.Config{MinOutcomes: 2}.WithDefaults()}
	policy := &CrawlPolicy{Key: ObjectName{testNamespace, "tiered"}, Rules: map[string]DomainLimits{"shop.example": {}},
		Tiers: map[string]*Tiering{"shop.example": tiering}}
	ts.retier(r.put(policy), policy)
	cheap, dear := testProxyState("c", withLabels("tier", "cheap")), testProxyState("d", withLabels("tier", "dear"))
	req := &AcquireRequest{Domain: "shop.example", Selector: labels.Everything()}

	if !ts.prepare(*req, t0, false) {
		t.Fatal("not prepared for a domain under a tiered rule")
	}
	if ts.admit(cheap).reason != nil || ts.admit(dear) != filtered {
		t.Errorf("at tier 0: cheap %+v, dear %+v; want cheap only", ts.admit(cheap), ts.admit(dear))
	}
	// Bans on the cheap tier escalate the budget to the dear one.
	ts.observe(cheap, OutcomeBanned, "shop.example", 3, t0)
	ts.prepare(*req, t0.Add(time.Second), false)
	if ts.admit(cheap) != filtered || ts.admit(dear).reason != nil {
		t.Errorf("after the bans: cheap %+v, dear %+v; want dear only", ts.admit(cheap), ts.admit(dear))
	}
	note, err := ts.confirm(dear, t0.Add(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	key := budgetKey{namespace: testNamespace, policy: "tiered", rule: "shop.example"}
	if want := (tierNote{key: key, tier: 1, tiered: true}); note != want {
		t.Errorf("the grant's tier note = %+v, want %+v", note, want)
	}
	ts.installed(testLease(dear, 1, "shop.example"), install{grant: true, tier: note, at: t0.Add(time.Second)})
	if got := r.counts[key].tiers[1].grants; got != 1 {
		t.Errorf("grants counted on the dear tier: %d, want 1", got)
	}
	// An acquire that names a selector of its own is not tiered.
	if ts.prepare(AcquireRequest{Domain: "shop.example", Selector: labels.SelectorFromSet(labels.Set{"tier": "cheap"})}, t0, false) {
		t.Error("prepared for an acquire with its own selector")
	}
	ts.termEnded()
	if len(ts.entries) != 0 {
		t.Errorf("%d tier states kept past the term", len(ts.entries))
	}
}

func TestTallyPolicy(t *testing.T) {
	ta := newTally(NoMetrics{})
	p := testProxyState("p1", func(i *ProxyInfo) { i.Pool = "pool" })
	ta.installed(testLease(p, 1, ""), install{grant: true, at: t0})
	ta.installed(testLease(p, 2, ""), install{at: t0}) // relearnt: not served here
	ta.count(p, OutcomeBanned, 1, 0)
	ta.count(p, OutcomeOK, 5, 1000)
	pool := ObjectName{Namespace: testNamespace, Name: "pool"}
	if diff := cmp.Diff(Outcomes{OK: 5, Banned: 1, TransferredBytes: 1000}, *ta.pools[pool]); diff != "" {
		t.Errorf("pool outcomes (-want +got):\n%s", diff)
	}
	b := ta.burnOf(p.info.Key)
	b.noteBan("a.example", t0)
	b.noteBan("b.example", t0.Add(time.Minute))
	if b.served != 1 || b.bannedWithin(30*time.Second, t0.Add(time.Minute)) != 1 {
		t.Errorf("burn: served %d, banned within 30s %d; want 1, 1", b.served, b.bannedWithin(30*time.Second, t0.Add(time.Minute)))
	}
	ta.forget(p.info.Key, true)
	if _, ok := ta.burns[p.info.Key]; ok {
		t.Error("a new instance kept its predecessor's burn")
	}
	// Bounded, the oldest ban giving way; equal times by domain, not map order.
	for i := range maxBurnDomains + 1 {
		b.noteBan(string(rune('a'+i%26))+string(rune('a'+i/26))+".example", t0)
	}
	if _, kept := b.bannedAt["aa.example"]; len(b.bannedAt) != maxBurnDomains || kept {
		t.Errorf("%d domains kept, the smallest kept %v; want %d, false", len(b.bannedAt), kept, maxBurnDomains)
	}
}

func TestSessionsPolicy(t *testing.T) {
	ss := newSessions(policyConfig()) // two sessions, an hour idle
	p1, p2 := testProxyState("p1"), testProxyState("p2")
	l := testLease(p1, 1, "")
	l.session, l.sessionScope = "s1", testNamespace
	ss.installed(l, install{grant: true, at: t0})
	k1 := sessionKey{"alice", testNamespace, "s1"}
	if got, ok := ss.chosen(k1); !ok || got != p1.info.Key {
		t.Fatalf("chosen = %v %v, want %s", got, ok, p1.info.Key)
	}
	// A lease relearnt on another proxy does not move a session that chose on this leader.
	other := testLease(p2, 2, "")
	other.session, other.sessionScope = "s1", testNamespace
	ss.installed(other, install{at: t0})
	if got, _ := ss.chosen(k1); got != p1.info.Key {
		t.Errorf("a relearnt lease moved the session to %s", got)
	}
	ss.use(sessionKey{"alice", testNamespace, "s2"}, p2.info.Key, t0.Add(time.Minute))
	ss.use(sessionKey{"alice", testNamespace, "s3"}, p2.info.Key, t0.Add(2*time.Minute)) // evicts s1, the least recently used
	if _, ok := ss.chosen(k1); ok {
		t.Error("the least recently used session survived the cap")
	}
	if e := ss.due(t0.Add(time.Hour)); e != nil {
		t.Errorf("due before any idle hour = %v", e)
	}
	if e := ss.due(t0.Add(time.Hour + 2*time.Minute)); e != (SessionDrop{key: sessionKey{"alice", testNamespace, "s2"}, idle: true}) {
		t.Errorf("due after s2's idle hour = %#v", e)
	}
}

func TestSessionStatesPolicy(t *testing.T) {
	st := newSessionStates(policyConfig()) // 4000 bytes in all, 2000 per owner
	p := testProxyState("p1")
	l := testLease(p, 1, "shop.example")
	st.put(stateKeyOf(l), make([]byte, 1000))
	if got := st.blob(l); len(got) != 1000 {
		t.Fatalf("blob = %d bytes, want 1000", len(got))
	}
	// The owner's cap evicts its own least recently used, never another's.
	l2 := testLease(p, 2, "news.example")
	st.put(stateKeyOf(l2), make([]byte, 1000))
	if st.blob(l) != nil || len(st.blob(l2)) != 1000 {
		t.Errorf("over the owner's cap: the older kept %v, the newer kept %v", st.blob(l) != nil, st.blob(l2) != nil)
	}
	st.drop("alice", p, "news.example") // a ban of the domain
	if st.blob(l2) != nil || st.bytes != 0 || len(st.owners) != 0 {
		t.Errorf("after the ban: blob %v, %d bytes, %d owners", st.blob(l2) != nil, st.bytes, len(st.owners))
	}
}

func TestDemandPolicy(t *testing.T) {
	var d demand
	members := labels.Set{"pool": "a"}
	d.refused(Refusal{namespace: testNamespace, holder: "w1", selector: labels.SelectorFromSet(members), at: t0})
	d.refused(Refusal{namespace: "other", holder: "w2", selector: labels.Everything(), at: t0})
	d.refused(Refusal{namespace: "", holder: "w3", selector: labels.SelectorFromSet(labels.Set{"pool": "b"}), at: t0})
	waiter := d.addWaiter("", labels.Everything(), "w4")
	if got, want := d.of(testNamespace, members, t0.Add(time.Second)), (WaitDemand{Waiting: 1, Refused: 1}); got != want {
		t.Errorf("demand = %+v, want %+v", got, want)
	}
	d.removeWaiter(waiter)
	if got := d.of(testNamespace, members, t0.Add(2*RefusalWindow)); got != (WaitDemand{}) {
		t.Errorf("demand after the window = %+v, want none", got)
	}
}
