package store

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
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

// DomainLimits is one budget; zero fields do not bind.
type DomainLimits struct {
	MaxConcurrent       int
	MinInterval         time.Duration
	MinIntervalPerProxy time.Duration
}

// CrawlPolicy is a CrawlPolicy object as the store applies it.
type CrawlPolicy struct {
	Key ObjectName
	// Rules by host: an exact host, or "*.suffix" for the suffix and
	// every name under it.
	Rules map[string]DomainLimits
	// Default binds domains no rule matches, one budget each; nil: none.
	Default *DomainLimits
	// Tiers are the tiers of the rules that have them, by host
	// (DefaultRuleHost for the default rule): tiers.go.
	Tiers map[string]*Tiering
}

// DefaultRuleHost names the default rule in stats and metrics.
const DefaultRuleHost = "*"

// RuleStats is one rule's use, summed over its budgets.
type RuleStats struct {
	Host                   string
	InUse, Waited, Refused int64
	Outcomes               Outcomes
	// Tier is a named rule's current tier; Tiers each tier's use;
	// BusiestDomains the default rule's busiest domains and their tier
	// (tiers.go). Empty for a rule without tiers.
	Tier           string
	Tiers          []TierStats
	BusiestDomains []DomainTier
}

type budgetKey struct {
	namespace, policy, rule string
	domain                  string // the default rule's domain; "" for named rules
}

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

// ruleCounts are a rule's live leases (over all its budgets: the default
// rule has one per domain), waits and refusals; they outlive its budgets.
type ruleCounts struct {
	inUse, waited, refused int64
	outcomes               Outcomes
	// tiers are the rule's grants and outcomes per tier (tiers.go).
	tiers []tierCounts
}

// ruleOf is a budget's rule: the key without the default rule's domain.
func (k budgetKey) ruleOf() budgetKey { k.domain = ""; return k }

type politeness struct {
	policies map[string][]*CrawlPolicy // by namespace, sorted by name
	budgets  map[budgetKey]*budget
	counts   map[budgetKey]*ruleCounts // by budgetKey.ruleOf
	// domains are the default rule's budgets of each namespace, and
	// domainTotal how many in all (domainbudgets.go).
	domains     map[string]*namespaceDomains
	domainTotal int
	// withDefault is how many namespaces have a policy with a default
	// rule: each gets maxDomains/withDefault budgets.
	withDefault int
	maxDomains  int
	// tiers are the tier states of the rules with tiers (tiers.go).
	tiers tierStates
}

func newPoliteness(maxDomains int) politeness {
	if maxDomains <= 0 {
		maxDomains = DefaultMaxDomainBudgets
	}
	return politeness{policies: map[string][]*CrawlPolicy{}, budgets: map[budgetKey]*budget{}, counts: map[budgetKey]*ruleCounts{},
		domains: map[string]*namespaceDomains{}, maxDomains: maxDomains, tiers: newTierStates()}
}

// SetCrawlPolicy applies a policy (new or changed), recounting the live
// leases its budgets hold.
func (s *Store) SetCrawlPolicy(p CrawlPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old *CrawlPolicy
	ps := slices.DeleteFunc(s.polite.policies[p.Key.Namespace], func(q *CrawlPolicy) bool {
		if q.Key == p.Key {
			old = q
		}
		return q.Key == p.Key
	})
	ps = append(ps, &p)
	slices.SortFunc(ps, func(a, b *CrawlPolicy) int { return strings.Compare(a.Key.Name, b.Key.Name) })
	s.polite.policies[p.Key.Namespace] = ps
	s.rechargeLocked(p.Key.Namespace)
	s.resharedLocked()
	s.retierLocked(old, &p)
}

// DeleteCrawlPolicy stops applying a policy.
func (s *Store) DeleteCrawlPolicy(key ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old *CrawlPolicy
	ps := slices.DeleteFunc(s.polite.policies[key.Namespace], func(q *CrawlPolicy) bool {
		if q.Key == key {
			old = q
		}
		return q.Key == key
	})
	if len(ps) == 0 {
		delete(s.polite.policies, key.Namespace)
	} else {
		s.polite.policies[key.Namespace] = ps
	}
	s.rechargeLocked(key.Namespace)
	s.resharedLocked()
	s.retierLocked(old, nil)
}

// rechargeLocked drops the namespace's budgets and charges its live
// leases to the budgets the policies name now. The counts of rules that
// remain are kept.
func (s *Store) rechargeLocked(namespace string) {
	for k, b := range s.polite.budgets {
		if k.namespace == namespace {
			s.dropBudgetLocked(b)
		}
	}
	for k, c := range s.polite.counts {
		if k.namespace == namespace {
			if _, _, _, ok := ruleNamed(s.polite.policies[namespace], k.policy, k.rule); !ok {
				delete(s.polite.counts, k)
			}
			c.inUse = 0 // counted again below
		}
	}
	for _, l := range s.leases {
		if l.state == stateLive && l.proxyKey.Namespace == namespace {
			l.budget = nil
			s.chargeLocked(l)
		}
	}
}

// budgetLocked is the budget a grant for domain on a proxy of namespace
// falls under, nil when no rule binds it. create makes a missing one.
func (s *Store) budgetLocked(namespace, domain string, create bool) *budget {
	if domain == "" {
		return nil
	}
	policy, rule, limits, ok := matchRule(s.polite.policies[namespace], domain)
	if !ok {
		return nil
	}
	key := budgetKey{namespace: namespace, policy: policy, rule: rule}
	if rule == DefaultRuleHost {
		key.domain = domain
	}
	b := s.polite.budgets[key]
	if b == nil && create {
		b = &budget{key: key, limits: limits, counts: s.polite.countsOf(key), idleAt: -1}
		s.polite.budgets[key] = b
		if key.domain != "" {
			s.addDomainBudgetLocked(b)
		}
	}
	return b
}

// countsOf is the rule counts of k's rule, made when missing.
func (p *politeness) countsOf(k budgetKey) *ruleCounts {
	c := p.counts[k.ruleOf()]
	if c == nil {
		c = &ruleCounts{}
		p.counts[k.ruleOf()] = c
	}
	return c
}

// matchRule finds the most specific rule for domain: an exact host, then
// the longest suffix, then a default; across policies the first by name.
func matchRule(policies []*CrawlPolicy, domain string) (policy, rule string, limits DomainLimits, ok bool) {
	best, bestLen := hostrule.NoMatch, 0
	for _, p := range policies {
		for host, l := range p.Rules {
			if rank := hostrule.Rank(host, domain); rank != hostrule.NoMatch && hostrule.Better(rank, len(host), best, bestLen) {
				best, bestLen, policy, rule, limits = rank, len(host), p.Key.Name, host, l
			}
		}
		if p.Default != nil && best < hostrule.Default {
			best, policy, rule, limits = hostrule.Default, p.Key.Name, DefaultRuleHost, *p.Default
		}
	}
	return policy, rule, limits, best != hostrule.NoMatch
}

// ruleNamed finds a rule by policy name and host ("*": the default).
func ruleNamed(policies []*CrawlPolicy, policy, rule string) (string, string, DomainLimits, bool) {
	for _, p := range policies {
		if p.Key.Name != policy {
			continue
		}
		if rule == DefaultRuleHost && p.Default != nil {
			return policy, rule, *p.Default, true
		}
		if l, ok := p.Rules[rule]; ok {
			return policy, rule, l, true
		}
	}
	return "", "", DomainLimits{}, false
}

// politeCheck answers, for one selection, when a grant for its domain on
// a proxy fits the proxy's namespace's budget. It looks a namespace's
// budget up once: a selection may walk thousands of proxies, most often
// of one namespace (kept without a map, so a check allocates nothing).
type politeCheck struct {
	s      *Store
	domain string
	now    time.Time
	ns     string  // the namespace last looked up
	b      *budget // its budget, nil for none
	looked bool
	memo   map[string]*budget // the others, once a second namespace shows up
}

// politeCheckLocked is a check for domain; its zero value (no domain, or
// no policy anywhere) lets every grant through.
func (s *Store) politeCheckLocked(domain string, now time.Time) politeCheck {
	if domain == "" || len(s.polite.policies) == 0 {
		return politeCheck{}
	}
	return politeCheck{s: s, domain: domain, now: now}
}

// until is zero when a grant on p fits now, else when it will, and the
// budget that holds it back.
func (c *politeCheck) until(p *proxyState) (time.Time, *budget) {
	if c.s == nil {
		return time.Time{}, nil
	}
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
			b = c.s.budgetLocked(ns, c.domain, false)
		}
		c.ns, c.b, c.looked = ns, b, true
	}
	if c.b == nil {
		return time.Time{}, nil
	}
	return politeUntilLocked(c.b, p.info.Key, c.now), c.b
}

// politeUntilLocked is when b lets a grant on proxy happen: zero for now,
// a time for an interval, or far when only a release can free it.
func politeUntilLocked(b *budget, proxy ObjectName, now time.Time) time.Time {
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

// chargeLocked charges a live lease with a domain to its budget.
func (s *Store) chargeLocked(l *lease) {
	b := s.budgetLocked(l.proxyKey.Namespace, l.domain, true)
	if b == nil {
		return
	}
	l.budget = b
	if b.inUse++; b.inUse == 1 {
		s.busyDomainBudgetLocked(b)
	}
	b.counts.inUse++
	s.observeInUseLocked(b)
}

func (s *Store) observeInUseLocked(b *budget) {
	if m, ok := s.metrics.(PolicyMetrics); ok {
		m.SetDomainBudgetInUse(b.key.namespace, b.key.policy, b.key.rule, int(b.counts.inUse))
	}
}

// noteGrantLocked records a new grant's time in its budget.
func noteGrantLocked(l *lease, now time.Time) {
	b := l.budget
	if b == nil {
		return
	}
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
		b.lastOn[l.proxyKey] = now
	}
}

// unchargeLocked returns an ending lease's share of its budget.
func (s *Store) unchargeLocked(l *lease) {
	b := l.budget
	if b == nil {
		return
	}
	l.budget = nil
	if b.inUse--; b.inUse == 0 {
		s.idleDomainBudgetLocked(b)
	}
	b.counts.inUse--
	s.observeInUseLocked(b)
}

// notePoliteLocked counts an acquire that waits or is refused for a
// budget, in its rule's counts and the metrics.
func (s *Store) notePoliteLocked(b *budget, refused bool) {
	outcome := "waited"
	if refused {
		outcome = "refused"
		b.counts.refused++
	} else {
		b.counts.waited++
	}
	if m, ok := s.metrics.(PolicyMetrics); ok {
		m.ObserveDomainLimited(b.key.namespace, b.key.policy, b.key.rule, outcome)
	}
}

// CrawlPolicyStats returns each rule's use of the policy, named rules by
// host, then the default ("*"), summed over its domains.
func (s *Store) CrawlPolicyStats(key ObjectName) []RuleStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p *CrawlPolicy
	for _, q := range s.polite.policies[key.Namespace] {
		if q.Key == key {
			p = q
		}
	}
	if p == nil {
		return nil
	}
	byRule := map[string]*RuleStats{}
	var out []RuleStats
	for host := range p.Rules {
		out = append(out, RuleStats{Host: host})
	}
	slices.SortFunc(out, func(a, b RuleStats) int { return strings.Compare(a.Host, b.Host) })
	if p.Default != nil {
		out = append(out, RuleStats{Host: DefaultRuleHost})
	}
	for i := range out {
		byRule[out[i].Host] = &out[i]
	}
	for k, c := range s.polite.counts {
		if r := byRule[k.rule]; r != nil && k.namespace == key.Namespace && k.policy == key.Name {
			r.InUse, r.Waited, r.Refused, r.Outcomes = c.inUse, c.waited, c.refused, c.outcomes
		}
	}
	for i := range out {
		s.tierStatsLocked(p, &out[i])
	}
	return out
}

// PolicyMetrics, when a Metrics implements it too, receives the crawl
// policies' budgets in use and the acquires they made wait or refused.
type PolicyMetrics interface {
	SetDomainBudgetInUse(namespace, policy, rule string, n int)
	ObserveDomainLimited(namespace, policy, rule, outcome string)
}
