package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
)

// healthMetrics are the health engine's (pkg/health.Metrics).
type healthMetrics struct {
	probeDuration   *prometheus.HistogramVec
	probed          *probedProxies
	byVerdict       *prometheus.GaugeVec
	scheduleDelay   prometheus.Histogram
	dispatchSkipped prometheus.Counter
	reports         *prometheus.CounterVec
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
		probed: newProbedProxies(),
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
	return []prometheus.Collector{h.probeDuration, h.probed, h.byVerdict, h.scheduleDelay, h.dispatchSkipped, h.reports}
}

// ObserveProbe records a finished probe.
func (m *Metrics) ObserveProbe(key cache.ObjectName, result string, duration time.Duration, started time.Time) {
	m.health.probeDuration.WithLabelValues(result).Observe(duration.Seconds())
	m.health.probed.setLastProbe(key, started)
}

// SetConsecutiveFailures records a proxy's current run of failed probes.
func (m *Metrics) SetConsecutiveFailures(key cache.ObjectName, failures int) {
	m.health.probed.setFailures(key, failures)
}

// ForgetProxy drops the per-proxy series of a proxy no longer probed.
func (m *Metrics) ForgetProxy(key cache.ObjectName) {
	m.health.probed.forget(key)
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

// probedProxies are the two per-proxy series, probe_last_timestamp_seconds
// and probe_consecutive_failures, kept as one small map entry per proxy and
// turned into samples only when scraped. Two GaugeVec children cost about
// 1 KB a proxy (10.5 MB of live heap at 10,000 proxies, the largest item
// after the Proxy cache); an entry here is a key and 16 bytes
// (docs/decisions/0151-per-proxy-probe-series-map-entry.md).
type probedProxies struct {
	lastProbe, failures *prometheus.Desc

	mu      sync.Mutex
	proxies map[cache.ObjectName]probedProxy
}

// probedProxy is what one proxy exports; a series exists once it was set.
type probedProxy struct {
	lastProbeSeconds float64
	failures         int32
	hasLastProbe     bool
	hasFailures      bool
}

func newProbedProxies() *probedProxies {
	labels := []string{"namespace", "name"}
	return &probedProxies{
		lastProbe: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "probe_last_timestamp_seconds"),
			"Unix time the latest probe of a proxy started, whatever its result: the true probe recency (status.lastHealthCheckTime moves only on a reported verdict).",
			labels, nil),
		failures: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "probe_consecutive_failures"),
			"Failed probes in a row of a proxy; the verdict turns Unhealthy at spec.healthCheck.failureThreshold.",
			labels, nil),
		proxies: map[cache.ObjectName]probedProxy{},
	}
}

func (p *probedProxies) setLastProbe(key cache.ObjectName, started time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.proxies[key]
	e.lastProbeSeconds, e.hasLastProbe = float64(started.UnixNano())/1e9, true
	p.proxies[key] = e
}

func (p *probedProxies) setFailures(key cache.ObjectName, failures int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.proxies[key]
	e.failures, e.hasFailures = int32(min(failures, 1<<31-1)), true
	p.proxies[key] = e
}

func (p *probedProxies) forget(key cache.ObjectName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.proxies, key)
}

// Describe implements prometheus.Collector.
func (p *probedProxies) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.lastProbe
	ch <- p.failures
}

// Collect implements prometheus.Collector. It copies the map under the lock
// and builds the samples after, so that probes are not held up by a scrape.
func (p *probedProxies) Collect(ch chan<- prometheus.Metric) {
	type sample struct {
		key cache.ObjectName
		probedProxy
	}
	p.mu.Lock()
	samples := make([]sample, 0, len(p.proxies))
	for k, e := range p.proxies {
		samples = append(samples, sample{k, e})
	}
	p.mu.Unlock()
	for _, s := range samples {
		if s.hasLastProbe {
			ch <- prometheus.MustNewConstMetric(p.lastProbe, prometheus.GaugeValue, s.lastProbeSeconds, s.key.Namespace, s.key.Name)
		}
		if s.hasFailures {
			ch <- prometheus.MustNewConstMetric(p.failures, prometheus.GaugeValue, float64(s.failures), s.key.Namespace, s.key.Name)
		}
	}
}
