package bandetect

import (
	"slices"
	"strings"
	"sync"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
)

// Rules are the CrawlPolicies' ban rules, compiled, for the gateway to
// pick the detector of a request's domain. A domain matches the rule the
// lease store charges it to (both rank by pkg/hostrule): an exact host,
// then the longest "*.suffix", then a default; across a namespace's
// policies the first by name. No rule: Default. Safe for concurrent use.
type Rules struct {
	mu   sync.RWMutex
	byNS map[string][]compiledPolicy // sorted by name
}

type compiledPolicy struct {
	name     string
	hosts    map[string]*Detector
	fallback *Detector // the default rule's; nil: none
}

// NewRules holds no policy: every domain is judged by Default.
func NewRules() *Rules { return &Rules{byNS: map[string][]compiledPolicy{}} }

// Set applies a policy, new or changed. Patterns that are not RE2 are
// left out (the operator reports them in the policy's Valid condition).
func (r *Rules) Set(p *crawlv1alpha1.CrawlPolicy) {
	c := compiledPolicy{name: p.Name, hosts: map[string]*Detector{}}
	for _, rule := range p.Spec.Rules {
		c.hosts[rule.Host], _ = Compile(rule.BanDetection, "")
	}
	if p.Spec.Default != nil {
		c.fallback, _ = Compile(p.Spec.Default.BanDetection, "")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := slices.DeleteFunc(r.byNS[p.Namespace], func(q compiledPolicy) bool { return q.name == p.Name })
	ps = append(ps, c)
	slices.SortFunc(ps, func(a, b compiledPolicy) int { return strings.Compare(a.name, b.name) })
	r.byNS[p.Namespace] = ps
}

// Delete forgets a policy.
func (r *Rules) Delete(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := slices.DeleteFunc(r.byNS[namespace], func(q compiledPolicy) bool { return q.name == name })
	if len(ps) == 0 {
		delete(r.byNS, namespace)
		return
	}
	r.byNS[namespace] = ps
}

// For is the detector of domain (lower case, no port) for a proxy of
// namespace.
func (r *Rules) For(namespace, domain string) *Detector {
	if r == nil {
		return Default()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var best *Detector
	bestRank, bestLen := hostrule.NoMatch, 0
	for _, p := range r.byNS[namespace] {
		for host, d := range p.hosts {
			if rank := hostrule.Rank(host, domain); rank != hostrule.NoMatch && hostrule.Better(rank, len(host), bestRank, bestLen) {
				best, bestRank, bestLen = d, rank, len(host)
			}
		}
		if p.fallback != nil && bestRank < hostrule.Default {
			best, bestRank = p.fallback, hostrule.Default
		}
	}
	if best == nil {
		return Default()
	}
	return best
}
