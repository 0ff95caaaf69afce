package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// leaseMetrics are the lease API's (pkg/lease/store.Metrics).
type leaseMetrics struct {
	acquires   *prometheus.CounterVec
	active     prometheus.Gauge
	held       *prometheus.HistogramVec
	cooldowns  prometheus.Gauge
	recovering prometheus.Gauge
	// The children of every predeclared label value, looked up in a plain
	// map (never written after predeclare) instead of WithLabelValues'
	// hashing and lock on every grant and release (docs/decisions/0112-lease-metrics-look-up-their-label.md).
	acquiresBy map[string]prometheus.Counter
	heldBy     map[string]prometheus.Observer
}

func newLeaseMetrics() leaseMetrics {
	return leaseMetrics{
		acquiresBy: map[string]prometheus.Counter{},
		heldBy:     map[string]prometheus.Observer{},
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "lease_acquires_total",
			Help:      "Finished acquire calls by outcome: granted, waited (granted after a long poll), none_free, cooling_down, recovering (a new leader not yet granting).",
		}, []string{"outcome"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "leases_active",
			Help:      "Live leases held by crawler workers on this replica (0 on a standby).",
		}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "lease_duration_seconds",
			Help:      "How long leases were held, by how they ended (released, expired, revoked).",
			Buckets:   prometheus.ExponentialBuckets(1, 2, 12), // 1 s to ~34 min
		}, []string{"end"}),
		cooldowns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "lease_cooldowns",
			Help:      "(proxy, domain) cool-downs in force after banned releases.",
		}),
		recovering: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "lease_recovering",
			Help:      "1 while a new leader refuses grants until every lease its predecessor could have granted has expired or been re-learned.",
		}),
	}
}

func (l leaseMetrics) predeclare(outcomes, ends []string) {
	for _, o := range outcomes {
		l.acquiresBy[o] = l.acquires.WithLabelValues(o)
	}
	for _, e := range ends {
		l.heldBy[e] = l.held.WithLabelValues(e)
	}
}

func (l leaseMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.acquires, l.active, l.held, l.cooldowns, l.recovering}
}

// ObserveAcquire counts a finished acquire by outcome.
func (m *Metrics) ObserveAcquire(outcome string) {
	if c, ok := m.lease.acquiresBy[outcome]; ok {
		c.Inc()
		return
	}
	m.lease.acquires.WithLabelValues(outcome).Inc()
}

// SetActiveLeases records the live leases.
func (m *Metrics) SetActiveLeases(n int) { m.lease.active.Set(float64(n)) }

// ObserveLeaseEnd records how long a lease was held and how it ended.
func (m *Metrics) ObserveLeaseEnd(end string, held time.Duration) {
	if o, ok := m.lease.heldBy[end]; ok {
		o.Observe(held.Seconds())
		return
	}
	m.lease.held.WithLabelValues(end).Observe(held.Seconds())
}

// SetCooldowns records the cool-downs in force.
func (m *Metrics) SetCooldowns(n int) { m.lease.cooldowns.Set(float64(n)) }

// SetRecovering records whether the lease API is recovering after a leader change.
func (m *Metrics) SetRecovering(recovering bool) {
	v := 0.0
	if recovering {
		v = 1
	}
	m.lease.recovering.Set(v)
}
