package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// outcomeMetrics count what the pools' IPs met (pkg/lease/store's
// OutcomeMetrics) and what a pool costs (pkg/pool's Metrics).
type outcomeMetrics struct {
	pool, rule          *prometheus.CounterVec
	cost, costPer1000OK *prometheus.GaugeVec
}

// outcomeValues are the outcomes a release or a gateway verdict counts.
var outcomeValues = []string{"ok", "banned", "error"}

func newOutcomeMetrics() outcomeMetrics {
	o := outcomeMetrics{
		pool: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "pool_outcomes_total",
			Help:      "Outcomes of leases on a ProxyPool's members, by namespace, pool and outcome (ok, banned, error): each release through the lease API and each request the gateway judged counts once.",
		}, []string{"namespace", "pool", "outcome"}),
		rule: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "crawl_policy_outcomes_total",
			Help:      "Outcomes counted for the CrawlPolicy rule a lease's domain matched, by namespace, policy, rule (its host; * for the default rule) and outcome.",
		}, []string{"namespace", "policy", "rule", "outcome"}),
		cost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_cost",
			Help:      "What a ProxyPool has cost since it was created, at its spec.cost prices, by namespace, pool and currency (status.usage.cost).",
		}, []string{"namespace", "pool", "currency"}),
		costPer1000OK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_cost_per_1000_ok",
			Help:      "A ProxyPool's cost per 1,000 ok outcomes, by namespace, pool and currency (status.usage.costPer1000OK).",
		}, []string{"namespace", "pool", "currency"}),
	}
	// Zero series with empty labels, for dashboards (and the e2e metrics
	// test) before any outcome or priced pool.
	for _, outcome := range outcomeValues {
		o.pool.WithLabelValues("", "", outcome)
		o.rule.WithLabelValues("", "", "", outcome)
	}
	o.cost.WithLabelValues("", "", "")
	o.costPer1000OK.WithLabelValues("", "", "")
	return o
}

func (o outcomeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.pool, o.rule, o.cost, o.costPer1000OK}
}

func (o outcomeMetrics) forgetPool(ns, pool string) {
	match := prometheus.Labels{"namespace": ns, "pool": pool}
	o.pool.DeletePartialMatch(match)
	o.cost.DeletePartialMatch(match)
	o.costPer1000OK.DeletePartialMatch(match)
}

// ObservePoolOutcomes counts n outcomes on a pool's members.
func (m *Metrics) ObservePoolOutcomes(namespace, pool, outcome string, n int64) {
	m.outcomes.pool.WithLabelValues(namespace, pool, outcome).Add(float64(n))
}

// ObserveRuleOutcomes counts n outcomes for a crawl policy rule.
func (m *Metrics) ObserveRuleOutcomes(namespace, policy, rule, outcome string, n int64) {
	m.outcomes.rule.WithLabelValues(namespace, policy, rule, outcome).Add(float64(n))
}

// SetPoolCost records a pool's cost and its cost per 1,000 ok outcomes
// (perThousandOK < 0: no ok outcome yet, the series is dropped).
func (m *Metrics) SetPoolCost(namespace, pool, currency string, cost, perThousandOK float64) {
	m.outcomes.cost.WithLabelValues(namespace, pool, currency).Set(cost)
	if perThousandOK < 0 {
		m.outcomes.costPer1000OK.DeleteLabelValues(namespace, pool, currency)
		return
	}
	m.outcomes.costPer1000OK.WithLabelValues(namespace, pool, currency).Set(perThousandOK)
}
