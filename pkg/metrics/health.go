package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
)

// healthMetrics are the health engine's (pkg/health.Metrics).
type healthMetrics struct {
	probeDuration       *prometheus.HistogramVec
	lastProbe           *prometheus.GaugeVec
	consecutiveFailures *prometheus.GaugeVec
	byVerdict           *prometheus.GaugeVec
	scheduleDelay       prometheus.Histogram
	dispatchSkipped     prometheus.Counter
	reports             *prometheus.CounterVec
}

func newHealthMetrics() healthMetrics {
	return healthMetrics{
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "probe_duration_seconds",
			Help:      "Duration of one health probe through a proxy (CONNECT and TLS included for https targets), by result.",
			// 1ms to ~16s: loopback at the bottom, a probe running into its timeout at the top.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"result"}),
		lastProbe: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "probe_last_timestamp_seconds",
			Help:      "Unix time the latest probe of a proxy started, whatever its result: the true probe recency (status.lastHealthCheckTime moves only on a reported verdict).",
		}, []string{"namespace", "name"}),
		consecutiveFailures: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "probe_consecutive_failures",
			Help:      "Failed probes in a row of a proxy; the verdict turns Unhealthy at spec.healthCheck.failureThreshold.",
		}, []string{"namespace", "name"}),
		byVerdict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "proxies_by_verdict",
			Help:      "Probed proxies by health verdict: healthy, unhealthy, or unknown (no verdict yet).",
		}, []string{"verdict"}),
		scheduleDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "probe_schedule_delay_seconds",
			Help:      "How late a probe started after its due time; above the scheduler tick, the probe pool is not keeping up (raise --health-workers).",
			Buckets:   prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		dispatchSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "probe_dispatch_skipped_total",
			Help:      "Due probes not dispatched because every probe worker was busy; each is retried at the next tick.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "health_reports_total",
			Help:      "Verdicts the health engine reported to the controller, each a status write, by reason: first_verdict, flip, or latency_change (a latency-only update, budgeted).",
		}, []string{"reason"}),
	}
}

// predeclare creates the result and report series so that rates work from
// the first scrape.
func (h healthMetrics) predeclare(results, reports []string) {
	for _, r := range results {
		h.probeDuration.WithLabelValues(r)
	}
	for _, r := range reports {
		h.reports.WithLabelValues(r)
	}
}

func (h healthMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.probeDuration, h.lastProbe, h.consecutiveFailures, h.byVerdict, h.scheduleDelay, h.dispatchSkipped, h.reports}
}

// ObserveProbe records a finished probe.
func (m *Metrics) ObserveProbe(key cache.ObjectName, result string, duration time.Duration, started time.Time) {
	m.health.probeDuration.WithLabelValues(result).Observe(duration.Seconds())
	m.health.lastProbe.WithLabelValues(key.Namespace, key.Name).Set(float64(started.UnixNano()) / 1e9)
}

// SetConsecutiveFailures records a proxy's current run of failed probes.
func (m *Metrics) SetConsecutiveFailures(key cache.ObjectName, failures int) {
	m.health.consecutiveFailures.WithLabelValues(key.Namespace, key.Name).Set(float64(failures))
}

// ForgetProxy drops the per-proxy series of a proxy no longer probed.
func (m *Metrics) ForgetProxy(key cache.ObjectName) {
	m.health.lastProbe.DeleteLabelValues(key.Namespace, key.Name)
	m.health.consecutiveFailures.DeleteLabelValues(key.Namespace, key.Name)
}

// SetProxiesByVerdict records how many probed proxies have each verdict.
func (m *Metrics) SetProxiesByVerdict(healthy, unhealthy, unknown int) {
	m.health.byVerdict.WithLabelValues("healthy").Set(float64(healthy))
	m.health.byVerdict.WithLabelValues("unhealthy").Set(float64(unhealthy))
	m.health.byVerdict.WithLabelValues("unknown").Set(float64(unknown))
}

// ObserveScheduleDelay records how late a probe started.
func (m *Metrics) ObserveScheduleDelay(delay time.Duration) {
	m.health.scheduleDelay.Observe(delay.Seconds())
}

// ProbeDispatchSkipped counts a due probe the saturated pool could not take.
func (m *Metrics) ProbeDispatchSkipped() { m.health.dispatchSkipped.Inc() }

// ObserveReport counts a verdict reported to the controller, by why.
func (m *Metrics) ObserveReport(why string) { m.health.reports.WithLabelValues(why).Inc() }
