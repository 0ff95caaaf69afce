package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// workqueueProvider implements workqueue.MetricsProvider with the metric
// names Kubernetes' own components use (workqueue_depth{name}, ...), so that
// the usual workqueue dashboards and alerts apply unchanged.
type workqueueProvider struct {
	depth                   *prometheus.GaugeVec
	adds                    *prometheus.CounterVec
	latency                 *prometheus.HistogramVec
	workDuration            *prometheus.HistogramVec
	unfinishedWork          *prometheus.GaugeVec
	longestRunningProcessor *prometheus.GaugeVec
	retries                 *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*workqueueProvider)(nil)

func newWorkqueueProvider() *workqueueProvider {
	const subsystem = "workqueue"
	name := []string{"name"}
	// 10ns to 10s, as Kubernetes' components use.
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 10)
	return &workqueueProvider{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem, Name: "depth",
			Help: "Current depth of the workqueue.",
		}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem, Name: "adds_total",
			Help: "Adds handled by the workqueue.",
		}, name),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem, Name: "queue_duration_seconds",
			Help:    "How long an item stays in the workqueue before being requested.",
			Buckets: buckets,
		}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem, Name: "work_duration_seconds",
			Help:    "How long processing an item from the workqueue takes.",
			Buckets: buckets,
		}, name),
		unfinishedWork: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem, Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration; large values suggest stuck workers.",
		}, name),
		longestRunningProcessor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem, Name: "longest_running_processor_seconds",
			Help: "How long the longest running worker of the workqueue has been running.",
		}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem, Name: "retries_total",
			Help: "Rate-limited re-adds handled by the workqueue.",
		}, name),
	}
}

func (p *workqueueProvider) mustRegister(r prometheus.Registerer) {
	r.MustRegister(p.depth, p.adds, p.latency, p.workDuration, p.unfinishedWork, p.longestRunningProcessor, p.retries)
}

func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name)
}

func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinishedWork.WithLabelValues(name)
}

func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunningProcessor.WithLabelValues(name)
}

func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
