package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// leaseStateMetrics are the lease store's bounded state (pkg/lease/store.StateMetrics).
type leaseStateMetrics struct {
	entries   *prometheus.GaugeVec
	evictions *prometheus.CounterVec
	// The crawl policies' budgets (pkg/lease/store.PolicyMetrics).
	policyInUse   *prometheus.GaugeVec
	policyLimited *prometheus.CounterVec
}

func newLeaseStateMetrics(kinds []string) leaseStateMetrics {
	l := leaseStateMetrics{
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "lease_state_entries",
			Help:      "Entries of the lease store's bounded state on this replica, by kind: sessions (sticky sessions), cooldowns ((proxy, domain) cool-down entries, in force or remembered), domain_budgets (crawl policies' default-rule budgets, one per domain), session_states (kept session state blobs), tiers (crawl policies' default-rule tier states, one per domain), site_bans (sites that banned a namespace's proxies within --lease-site-ban-window, at most 1,024 per namespace).",
		}, []string{"kind"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "lease_state_evictions_total",
			Help:      "Entries evicted because --lease-max-sessions, --lease-max-cooldowns, --lease-max-domain-budgets or --lease-max-state-bytes was reached (site_bans: a namespace's 1,024 sites), by kind.",
		}, []string{"kind"}),
		policyInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "crawl_policy_in_use",
			Help:      "Live leases a CrawlPolicy rule's budget holds, by namespace, policy and rule (the rule's host; * for the default rule, summed over its domains).",
		}, []string{"namespace", "policy", "rule"}),
		policyLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "crawl_policy_limited_total",
			Help:      "Acquires a CrawlPolicy rule's budget made wait (outcome waited) or refused with 429 (outcome refused), by namespace, policy and rule.",
		}, []string{"namespace", "policy", "rule", "outcome"}),
	}
	// Exported from the start as zero series with empty labels, for
	// dashboards (and the metrics test) before any policy is applied.
	l.policyInUse.WithLabelValues("", "", "")
	for _, outcome := range []string{"waited", "refused"} {
		l.policyLimited.WithLabelValues("", "", "", outcome)
	}
	for _, kind := range kinds {
		l.entries.WithLabelValues(kind)
		l.evictions.WithLabelValues(kind)
	}
	return l
}

func (l leaseStateMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.entries, l.evictions, l.policyInUse, l.policyLimited}
}

// SetStateEntries records the size of one kind of the lease store's bounded state.
func (m *Metrics) SetStateEntries(kind string, n int) {
	m.leaseState.entries.WithLabelValues(kind).Set(float64(n))
}

// ObserveStateEviction counts one entry evicted by its cap.
func (m *Metrics) ObserveStateEviction(kind string) {
	m.leaseState.evictions.WithLabelValues(kind).Inc()
}

// SetDomainBudgetInUse records the live leases a policy rule's budget holds.
func (m *Metrics) SetDomainBudgetInUse(namespace, policy, rule string, n int) {
	m.leaseState.policyInUse.WithLabelValues(namespace, policy, rule).Set(float64(n))
}

// ObserveDomainLimited counts an acquire a policy rule made wait or refused.
func (m *Metrics) ObserveDomainLimited(namespace, policy, rule, outcome string) {
	m.leaseState.policyLimited.WithLabelValues(namespace, policy, rule, outcome).Inc()
}
