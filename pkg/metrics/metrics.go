// Package metrics holds every Prometheus metric the operator exports, on one
// private registry served by Handler: reconcile results and durations, provider
// calls and their error classes, the fleet by phase, leadership, build info,
// client-go workqueue metrics, and the Go and process collectors.
//
// Nothing here registers on prometheus.DefaultRegisterer or runs at init, so
// tests may build as many Metrics as they like; client-go's workqueue metrics
// come in through a provider passed to the queue (WorkqueueProvider), not
// the process-global one.
//
// It measures; it does not decide anything. Callers (pkg/controller through
// its Metrics interface, pkg/operator for leadership) report what happened.
// It imports none of the packages it measures: their label values come in
// through Labels, and each package states the interface it reports to.
package metrics

import (
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// namespace prefixes the operator's own metrics; the workqueue metrics keep
// client-go's conventional names so that existing dashboards work.
const namespace = "proxy_operator"

// The sync results pkg/controller reports; they are pre-declared so that a
// replica that never reconciled exports zeros rather than nothing.
var syncResults = []string{"success", "requeue", "error"}

// Metrics is the operator's registry and the metrics on it. Its methods are
// safe for concurrent use.
type Metrics struct {
	registry *prometheus.Registry

	reconcileTotal    *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec
	providerCalls     *prometheus.CounterVec
	providerErrors    *prometheus.CounterVec
	gcCollected       *prometheus.CounterVec
	health            healthMetrics
	lease             leaseMetrics
	leasePush         leasePushMetrics
	leaseState        leaseStateMetrics
	outcomes          outcomeMetrics
	tiers             tierMetrics
	pool              poolMetrics
	poolDemand        poolDemandMetrics
	replica           replicaMetrics
	leader            prometheus.Gauge
	buildInfo         *prometheus.GaugeVec
	proxies           *proxyCollector
	workqueue         *workqueueProvider
}

// Labels are the label values the measured packages report, predeclared so
// that a dashboard sees zeros rather than gaps before the first event. Each
// package owns its values; the operator's wiring passes them in, so that
// this package imports none of the packages it measures. A value not listed
// is still counted, from its first observation.
type Labels struct {
	// ProbeResults and HealthReports are pkg/health's Results and Reports.
	ProbeResults, HealthReports []string
	// AcquireOutcomes, LeaseEnds and LeaseStateKinds are pkg/lease's
	// AcquireOutcomes, LeaseEnds and StateKinds.
	AcquireOutcomes, LeaseEnds, LeaseStateKinds []string
	// LeasePushResults are pkg/lease/push's Results.
	LeasePushResults []string
}

// New builds the metrics on a fresh private registry, with the series of
// labels predeclared.
func New(labels Labels) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		reconcileTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "reconcile_total",
			Help:      "Proxy syncs by result: success, requeue (a time-based poll follows) or error (retried with backoff).",
		}, []string{"result"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "reconcile_duration_seconds",
			Help:      "Duration of one Proxy sync, provider calls and the status write included, by result.",
			// 1ms to ~33s: a cached no-op sync at the bottom, a slow cloud API call at the top.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"result"}),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "provider_calls_total",
			Help:      "Calls to a provider by provider and operation (create, get, delete, list), whatever their outcome.",
		}, []string{"provider", "op"}),
		providerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "provider_errors_total",
			Help:      "Failed provider calls by provider, operation and error class (quota, permanent, transient). An instance reported as not found is an answer, not an error.",
		}, []string{"provider", "op", "class"}),
		gcCollected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "gc_collected_total",
			Help:      "Instances (and other provider resources) deleted by garbage collection, by provider and reason: orphaned (its Proxy confirmed gone by a live read), duplicate (a second instance of a Proxy whose status names another, confirmed by a live read), swept (a resource no instance uses any longer, such as an owned security group).",
		}, []string{"provider", "reason"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "leader",
			Help:      "1 while this process holds the leader lease (or runs without leader election), else 0.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "build_info",
			Help:      "Always 1; the version label says which build of the operator runs.",
		}, []string{"version"}),
		health:     newHealthMetrics(),
		lease:      newLeaseMetrics(),
		leaseState: newLeaseStateMetrics(labels.LeaseStateKinds),
		outcomes:   newOutcomeMetrics(),
		tiers:      newTierMetrics(),
		pool:       newPoolMetrics(),
		poolDemand: newPoolDemandMetrics(),
		replica:    newReplicaMetrics(),
		proxies:    &proxyCollector{desc: proxiesDesc},
		workqueue:  newWorkqueueProvider(),
	}
	for _, result := range syncResults {
		m.reconcileTotal.WithLabelValues(result)
		m.reconcileDuration.WithLabelValues(result)
	}
	m.registry.MustRegister(
		m.reconcileTotal, m.reconcileDuration,
		m.providerCalls, m.providerErrors, m.gcCollected,
		m.leader, m.buildInfo, m.proxies,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.health.predeclare(labels.ProbeResults, labels.HealthReports)
	m.registry.MustRegister(m.health.collectors()...)
	m.lease.predeclare(labels.AcquireOutcomes, labels.LeaseEnds)
	m.registry.MustRegister(m.lease.collectors()...)
	m.leasePush = newLeasePushMetrics(labels.LeasePushResults)
	m.registry.MustRegister(m.leasePush.collectors()...)
	m.registry.MustRegister(m.outcomes.collectors()...)
	m.registry.MustRegister(m.tiers.collectors()...)
	m.registry.MustRegister(m.leaseState.collectors()...)
	m.registry.MustRegister(m.pool.collectors()...)
	m.registry.MustRegister(m.poolDemand.collectors()...)
	m.registry.MustRegister(m.replica.collectors()...)
	m.workqueue.mustRegister(m.registry)
	return m
}

// ObserveCollected counts what garbage collection deleted, by reason
// (pkg/gc's Collected* constants).
func (m *Metrics) ObserveCollected(providerName, reason string, n int) {
	m.gcCollected.WithLabelValues(providerName, reason).Add(float64(n))
}

// Handler serves the registry in the Prometheus exposition formats, for /metrics.
func (m *Metrics) Handler() http.Handler { return handlerFor(m.registry) }

func handlerFor(registry *prometheus.Registry) http.Handler {
	return promhttp.InstrumentMetricHandler(registry, promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		// A collector failing (the lister, say) should not hide every other metric.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      registry,
	}))
}

// WorkqueueProvider makes a client-go workqueue configured with it report to
// this registry (depth, adds, queue latency, work duration, unfinished work,
// the longest running processor, retries, each labelled by queue name). It
// is passed explicitly, never installed with the process-global
// workqueue.SetProvider, so that several Metrics in one process (tests)
// each count their own queues.
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider { return m.workqueue }

// ObserveSync records one Proxy sync; it implements controller.Metrics.
func (m *Metrics) ObserveSync(result string, d time.Duration) {
	m.reconcileTotal.WithLabelValues(result).Inc()
	m.reconcileDuration.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveProviderCall records one provider call; it implements
// controller.Metrics. provider.ErrNotFound counts as a call only: "the
// instance is gone" is an answer the controller acts on, not a failure.
func (m *Metrics) ObserveProviderCall(providerName, op string, err error) {
	m.providerCalls.WithLabelValues(providerName, op).Inc()
	if err == nil || errors.Is(err, provider.ErrNotFound) {
		return
	}
	m.providerErrors.WithLabelValues(providerName, op, provider.ClassName(err)).Inc()
}

// SetLeader records whether this process leads.
func (m *Metrics) SetLeader(leading bool) {
	if leading {
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
}

// SetBuildInfo records the running version; call it once at start-up.
func (m *Metrics) SetBuildInfo(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version).Set(1)
}

// WatchProxies makes proxy_operator_proxies count the lister's Proxies by
// namespace and phase at every scrape. namespace is the one the operator
// watches ("" for all): its series exist, at 0, before its first Proxy.
// Until WatchProxies is called the metric has no series. Calling it again
// replaces the lister.
func (m *Metrics) WatchProxies(lister crawllisters.ProxyLister, namespace string) {
	m.proxies.source.Store(&proxySource{lister: lister, namespace: namespace})
}

var proxiesDesc = prometheus.NewDesc(
	prometheus.BuildFQName(namespace, "", "proxies"),
	"Proxies by namespace and status.phase, counted from the informer cache at scrape time. A Proxy not yet synced counts as Pending.",
	[]string{"namespace", "phase"}, nil,
)

// phases are exported even when empty so that a dashboard sees 0, not a gap.
var phases = []crawlv1alpha1.ProxyPhase{
	crawlv1alpha1.PhasePending,
	crawlv1alpha1.PhaseProvisioning,
	crawlv1alpha1.PhaseReady,
	crawlv1alpha1.PhaseUnhealthy,
	crawlv1alpha1.PhaseFailed,
	crawlv1alpha1.PhaseDeleting,
}

type proxySource struct {
	lister    crawllisters.ProxyLister
	namespace string
}

// proxyCollector counts Proxies at scrape time: always right, and free
// between scrapes (no event handler keeps a tally that could drift).
type proxyCollector struct {
	desc   *prometheus.Desc
	source atomic.Pointer[proxySource]
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	source := c.source.Load()
	if source == nil {
		return
	}
	proxies, err := source.lister.List(labels.Everything())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	byNamespace := map[string]map[crawlv1alpha1.ProxyPhase]int{}
	if source.namespace != "" {
		byNamespace[source.namespace] = map[crawlv1alpha1.ProxyPhase]int{}
	}
	for _, p := range proxies {
		phase := p.Status.Phase
		if phase == "" {
			phase = crawlv1alpha1.PhasePending
		}
		if byNamespace[p.Namespace] == nil {
			byNamespace[p.Namespace] = map[crawlv1alpha1.ProxyPhase]int{}
		}
		byNamespace[p.Namespace][phase]++
	}
	for ns, counts := range byNamespace {
		for _, phase := range phases {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[phase]), ns, string(phase))
			delete(counts, phase)
		}
		for phase, n := range counts { // a phase newer than this binary
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), ns, string(phase))
		}
	}
}
