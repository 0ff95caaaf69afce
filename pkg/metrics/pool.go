package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// PoolStates are the values of proxy_operator_pool_replicas' state label.
var PoolStates = []string{"desired", "current", "ready", "available", "updated", "draining", "unhealthy"}

// poolMetrics are the ProxyPool measurements pkg/pool reports.
type poolMetrics struct {
	replicas *prometheus.GaugeVec
	removals *prometheus.CounterVec
}

func newPoolMetrics() poolMetrics {
	return poolMetrics{
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_replicas",
			Help:      "ProxyPool members by pool and state: desired (spec.replicas), current (existing, leaving ones included), ready, available (Ready, not draining), updated (current revision, not too old), draining, unhealthy.",
		}, []string{"namespace", "pool", "state"}),
		removals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "pool_member_removals_total",
			Help:      "ProxyPool members chosen for removal, by pool and reason: OutOfDate, TooOld, Unhealthy, ScaledDown, spec.recycle's Burned and UsedUp, and the re-rolls DuplicateExitIP and ExitCountryMismatch.",
		}, []string{"namespace", "pool", "reason"}),
	}
}

func (p poolMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.replicas, p.removals}
}

// SetPoolReplicas records a pool's members by state (pkg/pool, every sync).
func (m *Metrics) SetPoolReplicas(ns, pool string, byState map[string]int) {
	for _, state := range PoolStates {
		m.pool.replicas.WithLabelValues(ns, pool, state).Set(float64(byState[state]))
	}
}

// ForgetPool drops a deleted pool's series.
func (m *Metrics) ForgetPool(ns, pool string) {
	m.pool.replicas.DeletePartialMatch(prometheus.Labels{"namespace": ns, "pool": pool})
	m.pool.removals.DeletePartialMatch(prometheus.Labels{"namespace": ns, "pool": pool})
	m.poolDemand.forget(ns, pool)
	m.outcomes.forgetPool(ns, pool)
}

// ObservePoolRemoval counts a member chosen for removal.
func (m *Metrics) ObservePoolRemoval(ns, pool, reason string) {
	m.pool.removals.WithLabelValues(ns, pool, reason).Inc()
}
