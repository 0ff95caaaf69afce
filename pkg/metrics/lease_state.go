package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

// leaseStateMetrics are the lease store's bounded state (pkg/lease.StateMetrics).
type leaseStateMetrics struct {
	entries   *prometheus.GaugeVec
	evictions *prometheus.CounterVec
}

func newLeaseStateMetrics() leaseStateMetrics {
	l := leaseStateMetrics{
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "lease_state_entries",
			Help:      "Entries of the lease store's bounded state on this replica, by kind: sessions (sticky sessions), cooldowns ((proxy, domain) cool-down entries, in force or remembered).",
		}, []string{"kind"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "lease_state_evictions_total",
			Help:      "Entries evicted because --lease-max-sessions or --lease-max-cooldowns was reached, by kind.",
		}, []string{"kind"}),
	}
	for _, kind := range []string{lease.StateSessions, lease.StateCooldowns} {
		l.entries.WithLabelValues(kind)
		l.evictions.WithLabelValues(kind)
	}
	return l
}

func (l leaseStateMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.entries, l.evictions}
}

// SetStateEntries records the size of one kind of the lease store's bounded state.
func (m *Metrics) SetStateEntries(kind string, n int) {
	m.leaseState.entries.WithLabelValues(kind).Set(float64(n))
}

// ObserveStateEviction counts one entry evicted by its cap.
func (m *Metrics) ObserveStateEviction(kind string) {
	m.leaseState.evictions.WithLabelValues(kind).Inc()
}

var _ lease.StateMetrics = (*Metrics)(nil)
