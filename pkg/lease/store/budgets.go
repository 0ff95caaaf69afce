package store

import (
	"errors"
	"maps"
	"slices"
	"time"
)

// Politeness: fleet-wide per-domain budgets from CrawlPolicy objects
// (docs/politeness.md). A grant for a domain on a proxy of a namespace is
// made only within the budget of the rule that matches the domain in that
// namespace's policies: at most MaxConcurrent live leases, no two grants
// closer than MinInterval (fleet-wide) or MinIntervalPerProxy (on one
// proxy). A named rule has one budget for every domain it matches; the
// default rule one per domain, capped in number per namespace with idle
// ones evicted (domainbudgets.go).

// ErrDomainLimited: the crawl policy's budget for the domain is used up.
var ErrDomainLimited = errors.New("the crawl policy's budget for this domain is used up")

// DefaultMaxDomainBudgets bounds the default rule's per-domain budgets.
const DefaultMaxDomainBudgets = 100_000

type budget struct {
	key    budgetKey
	limits DomainLimits
	inUse  int
	last   time.Time
	// lastOn is the last grant on each proxy, for MinIntervalPerProxy.
	lastOn map[ObjectName]time.Time
	// pruneAt is the size of lastOn at which its elapsed entries go.
	pruneAt int
	counts  *ruleCounts
	// idleAt is the budget's place among its namespace's idle default-rule
	// budgets (domainbudgets.go), -1 while it is not one of them.
	idleAt int
}

// budgets is the policy: the budgets that exist, and the default rule's
// per namespace (domainbudgets.go).
type budgets struct {
	rules   *rules
	budgets map[budgetKey]*budget
	// domains are the default rule's budgets of each namespace, and
	// domainTotal how many in all.
	domains     map[string]*namespaceDomains
	domainTotal int
	metrics     Metrics

	// check is the prepared selection's.
	check politeCheck
}

func newBudgets(r *rules, m Metrics) *budgets {
	return &budgets{rules: r, budgets: map[budgetKey]*budget{}, domains: map[string]*namespaceDomains{}, metrics: m}
}

// politeCheck answers, for one selection, when a grant for its domain on
// a proxy fits the proxy's namespace's budget. It looks a namespace's
// budget up once: a selection may walk thousands of proxies, most often
// of one namespace (kept without a map, so a check allocates nothing).
type politeCheck struct {
	domain string
	now    time.Time
	ns     string  // the namespace last looked up
	b      *budget // its budget, nil for none
	looked bool
	memo   map[string]*budget // the others, once a second namespace shows up
}

func (bs *budgets) prepare(req AcquireRequest, now time.Time, _ bool) bool {
	bs.check = politeCheck{}
	if req.Domain == "" || len(bs.rules.policies) == 0 {
		return false
	}
	bs.check = politeCheck{domain: req.Domain, now: now}
	return true
}

func (bs *budgets) admit(p *proxyState) refusal {
	c := &bs.check
	ns := p.info.Key.Namespace
	if !c.looked || ns != c.ns {
		if c.looked {
			if c.memo == nil {
				c.memo = map[string]*budget{}
			}
			c.memo[c.ns] = c.b
		}
		b, seen := c.memo[ns]
		if !seen {
			b = bs.lookup(ns, c.domain)
		}
		c.ns, c.b, c.looked = ns, b, true
	}
	if c.b == nil {
		return refusal{}
	}
	if until := politeUntil(c.b, p.info.Key, c.now); !until.IsZero() {
		return refusal{reason: ErrDomainLimited, until: until, rule: c.b.key.ruleOf()}
	}
	return refusal{}
}

func (*budgets) relaxable() bool { return false }

// confirm makes sure the grant's default-rule budget has room in its
// namespace's share (domainbudgets.go).
func (bs *budgets) confirm(p *proxyState, now time.Time, emit func(Effect)) (tierNote, error) {
	return tierNote{}, bs.admitDomainBudget(p.info.Key.Namespace, bs.check.domain, now, emit)
}

// lookup is the budget a grant for domain on a proxy of ns falls under,
// nil when none exists (yet) or no rule binds it.
func (bs *budgets) lookup(ns, domain string) *budget {
	key, _, ok := bs.rules.match(ns, domain)
	if !ok {
		return nil
	}
	return bs.budgets[key]
}

// politeUntil is when b lets a grant on proxy happen: zero for now,
// a time for an interval, or a second on when only a release can free it.
func politeUntil(b *budget, proxy ObjectName, now time.Time) time.Time {
	var until time.Time
	if b.limits.MinInterval > 0 {
		if t := b.last.Add(b.limits.MinInterval); t.After(now) {
			until = t
		}
	}
	if b.limits.MinIntervalPerProxy > 0 {
		if t := b.lastOn[proxy].Add(b.limits.MinIntervalPerProxy); t.After(now) && t.After(until) {
			until = t
		}
	}
	if b.limits.MaxConcurrent > 0 && b.inUse >= b.limits.MaxConcurrent {
		// A release frees it; Retry-After cannot know when.
		until = now.Add(time.Second)
	}
	return until
}

// installed charges a live lease to its budget, made when missing, and a
// grant's time to it.
func (bs *budgets) installed(l *lease, how install) {
	bs.charge(l)
	if how.grant && l.budget != nil {
		noteGrant(l.budget, l.proxyKey, how.at)
	}
}

// charge charges a live lease with a domain to its budget.
func (bs *budgets) charge(l *lease) {
	key, limits, ok := bs.rules.match(l.proxyKey.Namespace, l.domain)
	if !ok {
		return
	}
	b := bs.budgets[key]
	if b == nil {
		b = &budget{key: key, limits: limits, counts: bs.rules.countsOf(key), idleAt: -1}
		bs.budgets[key] = b
		if key.domain != "" {
			bs.addDomainBudget(b)
		}
	}
	l.budget = b
	if b.inUse++; b.inUse == 1 {
		bs.busyDomainBudget(b)
	}
	b.counts.inUse++
	bs.rules.observeInUse(b.key)
}

// noteGrant records a new grant's time in its budget.
func noteGrant(b *budget, proxy ObjectName, now time.Time) {
	b.last = now
	if b.limits.MinIntervalPerProxy > 0 {
		if b.lastOn == nil {
			b.lastOn = map[ObjectName]time.Time{}
		}
		if len(b.lastOn) >= b.pruneAt {
			// Drop the elapsed; the next walk waits until the map has
			// doubled, so a grant pays O(1) for it on average.
			for k, t := range b.lastOn {
				if now.Sub(t) >= b.limits.MinIntervalPerProxy {
					delete(b.lastOn, k)
				}
			}
			b.pruneAt = max(64, 2*len(b.lastOn))
		}
		b.lastOn[proxy] = now
	}
}

// ended returns an ending lease's share of its budget.
func (bs *budgets) ended(l *lease) {
	b := l.budget
	if b == nil {
		return
	}
	l.budget = nil
	if b.inUse--; b.inUse == 0 {
		bs.idleDomainBudget(b)
	}
	b.counts.inUse--
	bs.rules.observeInUse(b.key)
}

func (*budgets) forget(ObjectName, bool) {}

// termEnded drops every budget: the leases they counted are forgotten with
// the term, and a budget left charged would be pinned for good (and
// counted twice once its lease is relearned).
func (bs *budgets) termEnded() {
	clear(bs.budgets)
	clear(bs.domains)
	bs.domainTotal = 0
	for k, c := range bs.rules.counts {
		c.inUse = 0
		if m, ok := bs.metrics.(PolicyMetrics); ok {
			m.SetDomainBudgetInUse(k.namespace, k.policy, k.rule, 0)
		}
	}
	setStateEntries(bs.metrics, StateDomainBudgets, 0)
}

// promoted moves every budget's last grants on by skew, so that no
// interval ends earlier on this clock than on the previous leader's.
func (bs *budgets) promoted(skew time.Duration) {
	for _, b := range bs.budgets {
		if !b.last.IsZero() {
			b.last = b.last.Add(skew)
		}
		for p, t := range b.lastOn {
			b.lastOn[p] = t.Add(skew)
		}
	}
}

// recharge drops the namespace's budgets and charges its live leases
// (forEachLive calls back with each) to the budgets the policies name now.
// The counts of rules that remain are kept; their live leases are counted
// again.
func (bs *budgets) recharge(namespace string, forEachLive func(func(*lease))) {
	// In the keys' order, not the map's: the idle heaps' layout is state too.
	for _, k := range slices.SortedFunc(maps.Keys(bs.budgets), compareBudgetKeys) {
		if k.namespace == namespace {
			bs.dropBudget(bs.budgets[k])
		}
	}
	for k, c := range bs.rules.counts {
		if k.namespace == namespace {
			c.inUse = 0
		}
	}
	forEachLive(func(l *lease) {
		if l.proxyKey.Namespace == namespace {
			l.budget = nil
			bs.charge(l)
		}
	})
}
