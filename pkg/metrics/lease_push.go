package metrics

import "github.com/prometheus/client_golang/prometheus"

// leasePushMetrics are the leader's pushes of lease ends and renewals to
// the instances that check lease credentials (pkg/lease/push.Metrics).
type leasePushMetrics struct {
	pushes  *prometheus.CounterVec
	pending prometheus.Gauge
	dropped prometheus.Counter
}

func newLeasePushMetrics(results []string) leasePushMetrics {
	m := leasePushMetrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "lease_pushes_total",
			Help:      "Pushes of lease updates (ends before expiry, renewals) to instances that check lease credentials, by result: ok, refused (another key, or none: not retried), failed (retried at the next interval).",
		}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "lease_push_pending",
			Help:      "Lease updates waiting to be pushed to their instances.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "lease_push_updates_dropped_total",
			Help:      "Lease updates given up: their credentials had all expired before an instance took them, the instance refused them, or too many were waiting.",
		}),
	}
	for _, r := range results {
		m.pushes.WithLabelValues(r)
	}
	return m
}

func (l leasePushMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.pushes, l.pending, l.dropped}
}

// ObservePush counts one push to an instance by result.
func (m *Metrics) ObservePush(result string) { m.leasePush.pushes.WithLabelValues(result).Inc() }

// SetPushPending records the lease updates waiting to be pushed.
func (m *Metrics) SetPushPending(n int) { m.leasePush.pending.Set(float64(n)) }

// PushUpdatesDropped counts lease updates given up.
func (m *Metrics) PushUpdatesDropped(n int) { m.leasePush.dropped.Add(float64(n)) }
