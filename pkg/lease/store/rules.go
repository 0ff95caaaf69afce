package store

import (
	"slices"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
)

// The crawl policies (docs/politeness.md) as the store applies them, and
// what happened under each rule: the live leases it holds, the acquires it
// made wait or refused, its outcomes and its tiers' use. The budgets
// (budgets.go), the tiers (tiers.go) and the tally share this one record of
// the rules; the counts outlive the budgets they sum.

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

// budgetKey names a budget: a rule of a policy in a namespace, and for the
// default rule the domain. A rule's key has no domain (ruleOf).
type budgetKey struct {
	namespace, policy, rule string
	domain                  string // the default rule's domain; "" for named rules
}

// ruleOf is a budget's rule: the key without the default rule's domain.
func (k budgetKey) ruleOf() budgetKey { k.domain = ""; return k }

// ruleCounts are a rule's live leases (over all its budgets: the default
// rule has one per domain), waits and refusals, outcomes and tiers' use.
type ruleCounts struct {
	inUse, waited, refused int64
	outcomes               Outcomes
	// tiers are the rule's grants and outcomes per tier (tiers.go).
	tiers []tierCounts
}

// rules are the crawl policies by namespace and every rule's counts.
type rules struct {
	policies map[string][]*CrawlPolicy // by namespace, sorted by name
	counts   map[budgetKey]*ruleCounts // by budgetKey.ruleOf
	// withDefault is how many namespaces have a policy with a default
	// rule: each gets maxDomains/withDefault per-domain budgets and tier
	// states (domainbudgets.go).
	withDefault int
	maxDomains  int
	metrics     Metrics
}

func newRules(cfg Config) *rules {
	maxDomains := cfg.MaxDomainBudgets
	if maxDomains <= 0 {
		maxDomains = DefaultMaxDomainBudgets
	}
	return &rules{policies: map[string][]*CrawlPolicy{}, counts: map[budgetKey]*ruleCounts{}, maxDomains: maxDomains, metrics: cfg.Metrics}
}

// put applies p (new or changed) and returns the policy it replaces, nil if new.
func (r *rules) put(p *CrawlPolicy) *CrawlPolicy {
	ps, old := r.without(p.Key)
	ps = append(ps, p)
	slices.SortFunc(ps, func(a, b *CrawlPolicy) int { return strings.Compare(a.Key.Name, b.Key.Name) })
	r.policies[p.Key.Namespace] = ps
	r.recount()
	return old
}

// delete stops applying the policy key and returns it, nil if unknown.
func (r *rules) delete(key ObjectName) *CrawlPolicy {
	ps, old := r.without(key)
	if len(ps) == 0 {
		delete(r.policies, key.Namespace)
	} else {
		r.policies[key.Namespace] = ps
	}
	r.recount()
	return old
}

// without is key's namespace's policies but key, and key's policy.
func (r *rules) without(key ObjectName) ([]*CrawlPolicy, *CrawlPolicy) {
	var old *CrawlPolicy
	ps := slices.DeleteFunc(r.policies[key.Namespace], func(q *CrawlPolicy) bool {
		if q.Key == key {
			old = q
		}
		return q.Key == key
	})
	return ps, old
}

// recount counts the namespaces with a default rule, and drops the counts
// of rules that are gone.
func (r *rules) recount() {
	n := 0
	for _, ps := range r.policies {
		if slices.ContainsFunc(ps, func(p *CrawlPolicy) bool { return p.Default != nil }) {
			n++
		}
	}
	r.withDefault = n
	for k := range r.counts {
		if _, _, _, ok := ruleNamed(r.policies[k.namespace], k.policy, k.rule); !ok {
			delete(r.counts, k)
		}
	}
}

// share is how many per-domain budgets (and tier states) each namespace
// with a default rule may keep.
func (r *rules) share() int {
	return max(1, r.maxDomains/max(1, r.withDefault))
}

// match finds the rule for domain in ns, and the key of its budget.
func (r *rules) match(ns, domain string) (budgetKey, DomainLimits, bool) {
	if domain == "" {
		return budgetKey{}, DomainLimits{}, false
	}
	policy, rule, limits, ok := matchRule(r.policies[ns], domain)
	if !ok {
		return budgetKey{}, DomainLimits{}, false
	}
	key := budgetKey{namespace: ns, policy: policy, rule: rule}
	if rule == DefaultRuleHost {
		key.domain = domain
	}
	return key, limits, true
}

// countsOf is the counts of k's rule, made when missing.
func (r *rules) countsOf(k budgetKey) *ruleCounts {
	c := r.counts[k.ruleOf()]
	if c == nil {
		c = &ruleCounts{}
		r.counts[k.ruleOf()] = c
	}
	return c
}

// countOutcome counts n outcomes for the rule of domain in ns, if one matches.
func (r *rules) countOutcome(ns, domain string, outcome Outcome, n int64) {
	key, _, ok := r.match(ns, domain)
	if !ok {
		return
	}
	r.countsOf(key).outcomes.add(outcome, n)
	if m, ok := r.metrics.(OutcomeMetrics); ok {
		m.ObserveRuleOutcomes(ns, key.policy, key.rule, string(outcome), n)
	}
}

// notePolite counts an acquire that waited for, or was refused by, rule's budget.
func (r *rules) notePolite(rule budgetKey, refused bool) {
	c := r.countsOf(rule)
	outcome := "waited"
	if refused {
		outcome = "refused"
		c.refused++
	} else {
		c.waited++
	}
	if m, ok := r.metrics.(PolicyMetrics); ok {
		m.ObserveDomainLimited(rule.namespace, rule.policy, rule.rule, outcome)
	}
}

// observeInUse publishes the live leases of k's rule.
func (r *rules) observeInUse(k budgetKey) {
	if m, ok := r.metrics.(PolicyMetrics); ok {
		m.SetDomainBudgetInUse(k.namespace, k.policy, k.rule, int(r.countsOf(k).inUse))
	}
}

// policy is the policy named key, nil if unknown.
func (r *rules) policy(key ObjectName) *CrawlPolicy {
	for _, q := range r.policies[key.Namespace] {
		if q.Key == key {
			return q
		}
	}
	return nil
}

// stats is each rule's use of p, named rules by host, then the default ("*").
func (r *rules) stats(p *CrawlPolicy) []RuleStats {
	var out []RuleStats
	for host := range p.Rules {
		out = append(out, RuleStats{Host: host})
	}
	slices.SortFunc(out, func(a, b RuleStats) int { return strings.Compare(a.Host, b.Host) })
	if p.Default != nil {
		out = append(out, RuleStats{Host: DefaultRuleHost})
	}
	for i := range out {
		if c := r.counts[budgetKey{namespace: p.Key.Namespace, policy: p.Key.Name, rule: out[i].Host}]; c != nil {
			out[i].InUse, out[i].Waited, out[i].Refused, out[i].Outcomes = c.inUse, c.waited, c.refused, c.outcomes
		}
	}
	return out
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

// PolicyMetrics, when a Metrics implements it too, receives the crawl
// policies' budgets in use and the acquires they made wait or refused.
type PolicyMetrics interface {
	SetDomainBudgetInUse(namespace, policy, rule string, n int)
	ObserveDomainLimited(namespace, policy, rule, outcome string)
}
