package store

import (
	"container/list"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// Tiers (docs/tiers.md): a crawl policy rule may list tiers of proxies,
// cheapest first. An acquire for a domain under such a rule that names no
// selector of its own is granted among the proxies of the tier its budget
// is on (pkg/tier decides which, from the outcomes on each tier). The
// state is kept like the budgets it shadows:
//
//   - A named rule has one tier state for all it matches; the default
//     rule one per domain, at most the namespace's share of
//     --lease-max-domain-budgets (the budgets' share), least recently
//     used evicted first, and only the namespace's own: a tenant leasing
//     junk domains forgets its own tiers, never another namespace's.
//     Evicting one is safe: the domain starts again at the first tier.
//   - It lives in the leader's memory. A new leader relearning a live
//     lease puts its domain at least at the tier of the lease's proxy
//     (installed), so a domain that escalated stays escalated while
//     its leases live; the rest is learnt again from outcomes, within one
//     window (docs/decisions/0342-tier-state-relearned-from-leases.md).

// Tiering is a rule's tiers as the store applies them.
type Tiering struct {
	// Names are the tiers' names, cheapest first; Selectors their proxies.
	Names     []string
	Selectors []labels.Selector
	Config    tier.Config
}

// StateTiers is the StateMetrics kind of the default rule's tier states.
const StateTiers = "tiers"

// TierMetrics, when a Metrics implements it too, counts grants and
// outcomes per tier: labelled by rule and tier index, never by domain.
type TierMetrics interface {
	ObserveTierGrant(namespace, policy, rule string, tier int)
	ObserveTierOutcomes(namespace, policy, rule string, tier int, outcome string, n int64)
}

// tierEntry is one budget's tier state.
type tierEntry struct {
	key    budgetKey
	state  tier.State
	grants int64
	// elem is its place in its namespace's LRU (default-rule domains only).
	elem *list.Element
}

// tierCounts are one tier's grants and outcomes, in a rule's counts.
type tierCounts struct {
	grants   int64
	outcomes Outcomes
}

// tiers is the policy: every budget's tier state.
type tiers struct {
	rules   *rules
	metrics Metrics
	entries map[budgetKey]*tierEntry
	// lru are each namespace's default-rule entries, most recent first.
	lru         map[string]*list.List
	domainTotal int
	// tiered counts the policies with tiers: none, and an acquire skips
	// the whole check.
	tiered int

	// sites are the site bans: a budget's tier on which its site may have
	// no more proxies moves on to the next (sitebans.go).
	sites *siteBans

	// check is the prepared selection's.
	check tierCheck
}

func newTiers(r *rules, m Metrics) *tiers {
	return &tiers{rules: r, metrics: m, entries: map[budgetKey]*tierEntry{}, lru: map[string]*list.List{}}
}

// tiering is the tiering of the rule that governs domain in ns, and the
// key of its tier state; nil when that rule has no tiers.
func (ts *tiers) tiering(ns, domain string) (*Tiering, budgetKey) {
	if domain == "" || ts.tiered == 0 {
		return nil, budgetKey{}
	}
	key, _, ok := ts.rules.match(ns, domain)
	if !ok {
		return nil, budgetKey{}
	}
	if p := ts.rules.policy(ObjectName{Namespace: ns, Name: key.policy}); p != nil {
		if t := p.Tiers[key.rule]; t != nil {
			return t, key
		}
	}
	return nil, budgetKey{}
}

// tierChoice is where a grant in one namespace goes: the proxies of the
// tiering's selector of tier.
type tierChoice struct {
	tiering *Tiering
	key     budgetKey
	tier    int
	probe   bool
}

// tierCheck answers, for one selection, whether a proxy is on the tier
// the grant's budget is on. Like politeCheck it looks a namespace up once.
type tierCheck struct {
	domain  string
	site    string
	now     time.Time
	noProbe bool
	ns      string
	choice  tierChoice
	looked  bool
	memo    map[string]tierChoice
}

// prepare: tiers bind an acquire with a domain under a rule with tiers
// that names no selector of its own (its caller chose the proxies).
// relaxed: a probe of a cheaper tier found nothing free there, so the
// grant goes to the budget's tier as if it were no probe.
func (ts *tiers) prepare(req AcquireRequest, now time.Time, relaxed bool) bool {
	ts.check = tierCheck{}
	if req.Domain == "" || ts.tiered == 0 || !req.Selector.Empty() {
		return false
	}
	ts.check = tierCheck{domain: req.Domain, site: req.site, now: now, noProbe: relaxed}
	return true
}

// choiceFor is the tier of a grant on a proxy of ns.
func (ts *tiers) choiceFor(ns string) tierChoice {
	c := &ts.check
	if c.looked && ns == c.ns {
		return c.choice
	}
	if c.looked {
		if c.memo == nil {
			c.memo = map[string]tierChoice{}
		}
		c.memo[c.ns] = c.choice
	}
	ch, seen := c.memo[ns]
	if !seen {
		ch.tiering, ch.key = ts.tiering(ns, c.domain)
		if ch.tiering != nil {
			var st tier.State
			if e := ts.entries[ch.key]; e != nil {
				st = e.state
			}
			ch.tier, ch.probe = st.Choose(ch.tiering.Config, c.now)
			if ch.probe && (c.noProbe || ts.siteBlocked(ns, ch.tier)) {
				ch.tier, ch.probe = st.Tier(), false
			}
			// A site that banned the bound's worth of this tier's proxies
			// gets the next tier's, not an error (docs/tiers.md); the
			// grant's note moves the budget there (installed).
			for !ch.probe && ch.tier+1 < len(ch.tiering.Selectors) && ts.siteBlocked(ns, ch.tier) {
				ch.tier++
			}
		}
	}
	c.ns, c.choice, c.looked = ns, ch, true
	return ch
}

// siteBlocked says whether the prepared selection's site may have no more
// of ns's proxies of tier.
func (ts *tiers) siteBlocked(ns string, tier int) bool {
	c := &ts.check
	if ts.sites == nil || c.site == "" || !ts.sites.has(ns, c.site) {
		return false
	}
	_, blocked := ts.sites.blocked(ns, c.site, tier, c.now)
	return blocked
}

// admit lets through the proxies on their budget's tier (or untiered).
func (ts *tiers) admit(p *proxyState) refusal {
	ch := ts.choiceFor(p.info.Key.Namespace)
	if ch.tiering == nil || ch.tiering.Selectors[ch.tier].Matches(labels.Set(p.info.Labels)) {
		return refusal{}
	}
	return filtered
}

// relaxable says whether any namespace's choice so far was a probe.
func (ts *tiers) relaxable() bool {
	if ts.check.choice.probe {
		return true
	}
	for _, ch := range ts.check.memo {
		if ch.probe {
			return true
		}
	}
	return false
}

// confirm notes the tier the grant on p goes to.
func (ts *tiers) confirm(p *proxyState, _ time.Time, _ func(Effect)) (tierNote, error) {
	if ts.check.domain == "" {
		return tierNote{}, nil // not prepared: an untiered acquire
	}
	if ch := ts.choiceFor(p.info.Key.Namespace); ch.tiering != nil {
		return tierNote{key: ch.key, tier: ch.tier, probe: ch.probe, tiered: true}, nil
	}
	return tierNote{}, nil
}

// installed records a grant in its budget's tier state; a lease relearnt
// by a new leader puts its domain's budget at least on the tier of its
// proxy (docs/decisions/0342-tier-state-relearned-from-leases.md).
func (ts *tiers) installed(l *lease, how install) {
	if !how.grant {
		ts.seed(l, how.at)
		return
	}
	note, at := how.tier, how.at
	if !note.tiered {
		return
	}
	t := ts.tieringOfKey(note.key)
	if t == nil || note.tier >= len(t.Names) {
		return // the policy changed between the decision and this apply
	}
	e := ts.entry(note.key)
	if !note.probe && note.tier > e.state.Tier() {
		// Only a site's bans put a grant above its budget's tier
		// (choiceFor): the budget moves there, as if it had come there now.
		e.state.Seed(note.tier, at)
	}
	e.state.Granted(t.Config, at, note.probe)
	e.grants++
	ts.counts(note.key, t, note.tier).grants++
	if m, ok := ts.metrics.(TierMetrics); ok {
		m.ObserveTierGrant(note.key.namespace, note.key.policy, note.key.rule, note.tier)
	}
}

// tieringOfKey is the tiering of key's rule, nil if it has none (now).
func (ts *tiers) tieringOfKey(key budgetKey) *Tiering {
	if p := ts.rules.policy(ObjectName{Namespace: key.namespace, Name: key.policy}); p != nil {
		return p.Tiers[key.rule]
	}
	return nil
}

func (*tiers) ended(*lease)            {}
func (*tiers) forget(ObjectName, bool) {}

// observe feeds n outcomes on p for domain at the time at to the tier state
// of its budget, when its rule has tiers and p is on one of them (the
// first whose selector matches it).
func (ts *tiers) observe(p *proxyState, outcome Outcome, domain string, n int64, at time.Time) {
	t, key := ts.tiering(p.info.Key.Namespace, domain)
	if t == nil {
		return
	}
	idx := slices.IndexFunc(t.Selectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(p.info.Labels)) })
	if idx < 0 {
		return
	}
	ts.counts(key, t, idx).outcomes.add(outcome, n)
	if m, ok := ts.metrics.(TierMetrics); ok {
		m.ObserveTierOutcomes(key.namespace, key.policy, key.rule, idx, string(outcome), n)
	}
	if outcome == OutcomeError {
		return // the proxy's failure, not the site's verdict
	}
	e := ts.entry(key)
	e.state.Observe(t.Config, len(t.Selectors), idx, outcome == OutcomeBanned, n, at)
}

// seed: a new leader relearned l; its domain's budget is on at least the
// tier of l's proxy.
func (ts *tiers) seed(l *lease, at time.Time) {
	t, key := ts.tiering(l.proxyKey.Namespace, l.domain)
	if t == nil {
		return
	}
	idx := slices.IndexFunc(t.Selectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(l.proxy.info.Labels)) })
	if idx > 0 {
		ts.entry(key).state.Seed(idx, at)
	}
}

// counts is tier idx's counts in key's rule counts.
func (ts *tiers) counts(key budgetKey, t *Tiering, idx int) *tierCounts {
	c := ts.rules.countsOf(key)
	if len(c.tiers) != len(t.Names) {
		c.tiers = make([]tierCounts, len(t.Names))
	}
	return &c.tiers[idx]
}

// entry is key's tier state, made when missing; a new default-rule one
// evicts its namespace's least recently used at its share, and every use
// makes it the most recent.
func (ts *tiers) entry(key budgetKey) *tierEntry {
	e := ts.entries[key]
	if key.domain == "" {
		if e == nil {
			e = &tierEntry{key: key}
			ts.entries[key] = e
		}
		return e
	}
	if e != nil {
		ts.lru[key.namespace].MoveToFront(e.elem)
		return e
	}
	if lru := ts.lru[key.namespace]; lru != nil {
		for share := ts.rules.share(); lru.Len() >= share && lru.Len() > 0; {
			ts.drop(lru.Back().Value.(*tierEntry))
			observeEviction(ts.metrics, StateTiers)
		}
	}
	// Evicting the last one lets the namespace's list go: look it up again.
	lru := ts.lru[key.namespace]
	if lru == nil {
		lru = list.New()
		ts.lru[key.namespace] = lru
	}
	e = &tierEntry{key: key}
	e.elem = lru.PushFront(e)
	ts.entries[key] = e
	ts.domainTotal++
	setStateEntries(ts.metrics, StateTiers, ts.domainTotal)
	return e
}

func (ts *tiers) drop(e *tierEntry) {
	delete(ts.entries, e.key)
	if e.elem == nil {
		return
	}
	lru := ts.lru[e.key.namespace]
	lru.Remove(e.elem)
	if lru.Len() == 0 {
		delete(ts.lru, e.key.namespace)
	}
	ts.domainTotal--
	setStateEntries(ts.metrics, StateTiers, ts.domainTotal)
}

// retier drops, when a policy changes from old to new (nil: it is
// deleted; old nil: it is new), the tier states and per-tier counts of
// the rules whose tiers changed: their tier indices mean other proxies
// now. The rest keep their tier. A namespace over its share (the shares
// shrink when another namespace gets a default rule) gives back its least
// recently used at once: a policy change is rare.
func (ts *tiers) retier(old, new *CrawlPolicy) {
	ts.tiered = 0
	for _, ps := range ts.rules.policies {
		for _, p := range ps {
			if len(p.Tiers) > 0 {
				ts.tiered++
			}
		}
	}
	share := ts.rules.share()
	for _, lru := range ts.lru {
		for lru.Len() > share {
			ts.drop(lru.Back().Value.(*tierEntry))
			observeEviction(ts.metrics, StateTiers)
		}
	}
	if old == nil || len(old.Tiers) == 0 {
		return
	}
	changed := map[string]bool{}
	for rule, t := range old.Tiers {
		if new == nil || new.Tiers[rule] == nil || !slices.Equal(new.Tiers[rule].Names, t.Names) {
			changed[rule] = true
			if c := ts.rules.counts[budgetKey{namespace: old.Key.Namespace, policy: old.Key.Name, rule: rule}]; c != nil {
				c.tiers = nil
			}
		}
	}
	if len(changed) == 0 {
		return
	}
	for k, e := range ts.entries {
		if k.namespace == old.Key.Namespace && k.policy == old.Key.Name && changed[k.rule] {
			ts.drop(e)
		}
	}
}

// promoted keeps the tier states as they are: a quiet period counted on
// another clock ends a little early or late, and either way the budget
// only probes the cheaper tier, it does not lose its place.
func (*tiers) promoted(time.Duration) {}

// termEnded drops every tier state when the term ends: a later term
// learns them afresh rather than from stale ones.
func (ts *tiers) termEnded() {
	clear(ts.entries)
	clear(ts.lru)
	ts.domainTotal = 0
	setStateEntries(ts.metrics, StateTiers, 0)
}

// TierStats is one tier's use in a rule.
type TierStats struct {
	Name     string
	Grants   int64
	Outcomes Outcomes
}

// DomainTier is a default-rule domain's tier.
type DomainTier struct {
	Domain, Tier string
	Grants       int64
}

// MaxBusiestDomains bounds RuleStats.BusiestDomains, taken from the
// busiestScan most recently used tier states of the namespace.
const (
	MaxBusiestDomains = 10
	busiestScan       = 1024
)

// stats fills r, a rule of policy p, with its tiers' use, its current
// tier (a named rule) or its busiest domains' (the default).
func (ts *tiers) stats(p *CrawlPolicy, r *RuleStats) {
	t := p.Tiers[r.Host]
	if t == nil {
		return
	}
	key := budgetKey{namespace: p.Key.Namespace, policy: p.Key.Name, rule: r.Host}
	c := ts.rules.counts[key]
	for i, name := range t.Names {
		ts := TierStats{Name: name}
		if c != nil && len(c.tiers) == len(t.Names) {
			ts.Grants, ts.Outcomes = c.tiers[i].grants, c.tiers[i].outcomes
		}
		r.Tiers = append(r.Tiers, ts)
	}
	if r.Host != DefaultRuleHost {
		r.Tier = t.Names[0]
		if e := ts.entries[key]; e != nil {
			r.Tier = t.Names[e.state.Tier()]
		}
		return
	}
	lru := ts.lru[p.Key.Namespace]
	if lru == nil {
		return
	}
	// A busy domain is a recently used one: looking at the most recent
	// only bounds the time the status writer holds the lock (100,000
	// states took 9 ms a walk; BenchmarkTierStatsAt100kDomains).
	n := 0
	for el := lru.Front(); el != nil && n < busiestScan; el, n = el.Next(), n+1 {
		e := el.Value.(*tierEntry)
		if e.key.policy != p.Key.Name {
			continue
		}
		r.BusiestDomains = insertBusiest(r.BusiestDomains, DomainTier{Domain: e.key.domain, Tier: t.Names[e.state.Tier()], Grants: e.grants})
	}
}

// insertBusiest puts d into top (by grants, then domain; at most
// MaxBusiestDomains) if it belongs there.
func insertBusiest(top []DomainTier, d DomainTier) []DomainTier {
	before := func(a, b DomainTier) bool {
		return a.Grants > b.Grants || (a.Grants == b.Grants && a.Domain < b.Domain)
	}
	if len(top) == MaxBusiestDomains && !before(d, top[len(top)-1]) {
		return top
	}
	i := len(top)
	for i > 0 && before(d, top[i-1]) {
		i--
	}
	top = slices.Insert(top, i, d)
	if len(top) > MaxBusiestDomains {
		top = top[:MaxBusiestDomains]
	}
	return top
}
