package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// tierMetrics count grants and outcomes per tier of a CrawlPolicy rule
// (pkg/lease/store's TierMetrics): labelled by rule and tier index, never
// by domain, so the series stay as few as the rules and tiers users wrote.
type tierMetrics struct {
	grants, outcomes *prometheus.CounterVec
}

func newTierMetrics() tierMetrics {
	t := tierMetrics{
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "crawl_policy_tier_grants_total",
			Help:      "Leases granted on each tier of a CrawlPolicy rule with tiers, by namespace, policy, rule (its host; * for the default rule) and tier (its index, 0 the cheapest).",
		}, []string{"namespace", "policy", "rule", "tier"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "crawl_policy_tier_outcomes_total",
			Help:      "Outcomes on the proxies of each tier of a CrawlPolicy rule with tiers, by namespace, policy, rule, tier (its index) and outcome (ok, banned, error).",
		}, []string{"namespace", "policy", "rule", "tier", "outcome"}),
	}
	// Zero series with empty labels, for dashboards before any tiered grant.
	t.grants.WithLabelValues("", "", "", "")
	for _, outcome := range outcomeValues {
		t.outcomes.WithLabelValues("", "", "", "", outcome)
	}
	return t
}

func (t tierMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.grants, t.outcomes}
}

// ObserveTierGrant counts a grant on a rule's tier.
func (m *Metrics) ObserveTierGrant(namespace, policy, rule string, tier int) {
	m.tiers.grants.WithLabelValues(namespace, policy, rule, strconv.Itoa(tier)).Inc()
}

// ObserveTierOutcomes counts n outcomes on a rule's tier.
func (m *Metrics) ObserveTierOutcomes(namespace, policy, rule string, tier int, outcome string, n int64) {
	m.tiers.outcomes.WithLabelValues(namespace, policy, rule, strconv.Itoa(tier), outcome).Add(float64(n))
}
