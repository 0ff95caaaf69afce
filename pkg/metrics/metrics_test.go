package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Metrics is what the packages it measures report to; they state the
// interfaces, this package imports none of them (imports_test.go).
var (
	_ controller.Metrics   = (*Metrics)(nil)
	_ store.StateMetrics   = (*Metrics)(nil)
	_ store.PolicyMetrics  = (*Metrics)(nil)
	_ store.OutcomeMetrics = (*Metrics)(nil)
	_ store.TierMetrics    = (*Metrics)(nil)
)

// testLabels are the label values the operator passes (pkg/operator's
// metricLabels), from the packages that own them.
var testLabels = Labels{
	ProbeResults:    health.Results,
	HealthReports:   health.Reports,
	AcquireOutcomes: store.AcquireOutcomes,
	LeaseEnds:       store.LeaseEnds,
	LeaseStateKinds: store.StateKinds,
}

func TestObserveSync(t *testing.T) {
	type sync struct {
		result string
		d      time.Duration
	}
	tests := map[string]struct {
		syncs []sync
		want  string
	}{
		"nothing synced exports zeros": {
			want: `
# HELP proxy_operator_reconcile_total Proxy syncs by result: success, requeue (a time-based poll follows) or error (retried with backoff).
# TYPE proxy_operator_reconcile_total counter
proxy_operator_reconcile_total{result="error"} 0
proxy_operator_reconcile_total{result="requeue"} 0
proxy_operator_reconcile_total{result="success"} 0
`,
		},
		"counts by result": {
			syncs: []sync{{"success", time.Millisecond}, {"success", 2 * time.Millisecond}, {"requeue", time.Second}, {"error", 3 * time.Second}},
			want: `
# HELP proxy_operator_reconcile_total Proxy syncs by result: success, requeue (a time-based poll follows) or error (retried with backoff).
# TYPE proxy_operator_reconcile_total counter
proxy_operator_reconcile_total{result="error"} 1
proxy_operator_reconcile_total{result="requeue"} 1
proxy_operator_reconcile_total{result="success"} 2
`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := New(testLabels)
			var wantSeconds float64
			for _, s := range tc.syncs {
				m.ObserveSync(s.result, s.d)
				wantSeconds += s.d.Seconds()
			}
			if err := testutil.CollectAndCompare(m.reconcileTotal, strings.NewReader(tc.want)); err != nil {
				t.Error(err)
			}
			count, sum := histogramTotals(t, m.reconcileDuration)
			if diff := cmp.Diff([]float64{float64(len(tc.syncs)), wantSeconds}, []float64{count, sum}); diff != "" {
				t.Errorf("reconcile_duration_seconds count and sum (-want +got):\n%s", diff)
			}
		})
	}
}

func TestObserveProviderCall(t *testing.T) {
	type call struct {
		provider, op string
		err          error
	}
	type key struct{ Provider, Op, Class string }
	tests := map[string]struct {
		calls      []call
		wantCalls  map[key]float64 // class unused
		wantErrors map[key]float64
	}{
		"success is a call": {
			calls:      []call{{"kubernetes", "create", nil}},
			wantCalls:  map[key]float64{{"kubernetes", "create", ""}: 1},
			wantErrors: map[key]float64{},
		},
		"not found is a call, not an error, even wrapped": {
			calls: []call{
				{"gce", "get", provider.ErrNotFound},
				{"gce", "get", fmt.Errorf("instance px-1: %w", provider.ErrNotFound)},
			},
			wantCalls:  map[key]float64{{"gce", "get", ""}: 2},
			wantErrors: map[key]float64{},
		},
		"errors by class": {
			calls: []call{
				{"gce", "create", provider.Quota(errors.New("CPUS exceeded"))},
				{"gce", "create", fmt.Errorf("creating: %w", provider.Permanent(errors.New("bad image")))},
				{"gce", "create", provider.Transient(errors.New("503"))},
				{"gce", "delete", errors.New("connection reset")}, // unclassified: transient
				{"local", "get", nil},
			},
			wantCalls: map[key]float64{
				{"gce", "create", ""}: 3,
				{"gce", "delete", ""}: 1,
				{"local", "get", ""}:  1,
			},
			wantErrors: map[key]float64{
				{"gce", "create", "quota"}:     1,
				{"gce", "create", "permanent"}: 1,
				{"gce", "create", "transient"}: 1,
				{"gce", "delete", "transient"}: 1,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := New(testLabels)
			for _, c := range tc.calls {
				m.ObserveProviderCall(c.provider, c.op, c.err)
			}
			gotCalls := map[key]float64{}
			for _, s := range collect(t, m.providerCalls) {
				l := labelsOf(s)
				gotCalls[key{l["provider"], l["op"], ""}] = s.GetCounter().GetValue()
			}
			gotErrors := map[key]float64{}
			for _, s := range collect(t, m.providerErrors) {
				l := labelsOf(s)
				gotErrors[key{l["provider"], l["op"], l["class"]}] = s.GetCounter().GetValue()
			}
			if diff := cmp.Diff(tc.wantCalls, gotCalls); diff != "" {
				t.Errorf("provider_calls_total (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantErrors, gotErrors); diff != "" {
				t.Errorf("provider_errors_total (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProxiesByPhase(t *testing.T) {
	const header = `
# HELP proxy_operator_proxies Proxies by namespace and status.phase, counted from the informer cache at scrape time. A Proxy not yet synced counts as Pending.
# TYPE proxy_operator_proxies gauge
`
	// zeros are the series of a namespace with no Proxy in any phase but those given.
	zeros := func(ns string, except ...string) string {
		var out []string
		for _, phase := range []string{"Deleting", "Failed", "Pending", "Provisioning", "Ready", "Unhealthy"} {
			if !slices.Contains(except, phase) {
				out = append(out, fmt.Sprintf("proxy_operator_proxies{namespace=%q,phase=%q} 0", ns, phase))
			}
		}
		return strings.Join(out, "\n") + "\n"
	}
	mixed := []*crawlv1alpha1.Proxy{
		newProxy("a", "ns1", crawlv1alpha1.PhaseReady),
		newProxy("b", "ns1", crawlv1alpha1.PhaseReady),
		newProxy("c", "ns2", crawlv1alpha1.PhaseReady),
		newProxy("d", "ns2", crawlv1alpha1.PhaseFailed),
		newProxy("e", "ns2", ""),
		newProxy("f", "ns2", crawlv1alpha1.PhasePending),
		newProxy("g", "ns1", crawlv1alpha1.PhaseDeleting),
	}
	tests := map[string]struct {
		watch     bool
		namespace string // the operator's --namespace
		proxies   []*crawlv1alpha1.Proxy
		want      string
	}{
		"no lister, no series": {
			want: "",
		},
		"empty fleet, all namespaces: no namespace to name": {
			watch: true,
			want:  "",
		},
		"empty fleet, one namespace watched: zeros": {
			watch:     true,
			namespace: "crawl",
			want:      header + zeros("crawl"),
		},
		"counts by namespace and phase; unsynced counts as Pending": {
			watch:   true,
			proxies: mixed,
			want: header + zeros("ns1", "Deleting", "Ready") + `proxy_operator_proxies{namespace="ns1",phase="Deleting"} 1
proxy_operator_proxies{namespace="ns1",phase="Ready"} 2
` + zeros("ns2", "Failed", "Pending", "Ready") + `proxy_operator_proxies{namespace="ns2",phase="Failed"} 1
proxy_operator_proxies{namespace="ns2",phase="Pending"} 2
proxy_operator_proxies{namespace="ns2",phase="Ready"} 1
`,
		},
		"a phase newer than this binary is exported too": {
			watch:     true,
			namespace: "ns",
			proxies:   []*crawlv1alpha1.Proxy{newProxy("a", "ns", "Hibernating")},
			want:      header + zeros("ns") + `proxy_operator_proxies{namespace="ns",phase="Hibernating"} 1` + "\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := New(testLabels)
			if tc.watch {
				m.WatchProxies(newLister(t, tc.proxies...), tc.namespace)
			}
			if err := testutil.CollectAndCompare(m.proxies, strings.NewReader(tc.want), "proxy_operator_proxies"); err != nil {
				t.Error(err)
			}
		})
	}
}

// The gauge follows the cache without anyone telling the metrics.
func TestProxiesFollowTheCache(t *testing.T) {
	m := New(testLabels)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	m.WatchProxies(crawllisters.NewProxyLister(indexer), "ns")
	ready := func() float64 {
		return gaugeValue(t, m, "proxy_operator_proxies", map[string]string{"namespace": "ns", "phase": "Ready"})
	}

	if got := ready(); got != 0 {
		t.Fatalf("Ready before any Proxy = %v, want 0", got)
	}
	p := newProxy("a", "ns", crawlv1alpha1.PhaseReady)
	if err := indexer.Add(p); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != 1 {
		t.Fatalf("Ready after add = %v, want 1", got)
	}
	if err := indexer.Delete(p); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != 0 {
		t.Fatalf("Ready after delete = %v, want 0", got)
	}
}

func TestLeaderAndBuildInfo(t *testing.T) {
	m := New(testLabels)
	if got := testutil.ToFloat64(m.leader); got != 0 {
		t.Errorf("leader at start = %v, want 0", got)
	}
	m.SetLeader(true)
	if got := testutil.ToFloat64(m.leader); got != 1 {
		t.Errorf("leader after SetLeader(true) = %v, want 1", got)
	}
	m.SetLeader(false)
	if got := testutil.ToFloat64(m.leader); got != 0 {
		t.Errorf("leader after SetLeader(false) = %v, want 0", got)
	}

	m.SetBuildInfo("v0.0.1")
	m.SetBuildInfo("v1.2.3") // the last one counts; never two series
	want := `
# HELP proxy_operator_build_info Always 1; the version label says which build of the operator runs.
# TYPE proxy_operator_build_info gauge
proxy_operator_build_info{version="v1.2.3"} 1
`
	if err := testutil.CollectAndCompare(m.buildInfo, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The provider is exercised through a queue configured with it directly:
// workqueue.SetProvider is process-global and first-call-wins, so a test
// cannot install a fresh one per case.
func TestWorkqueueProvider(t *testing.T) {
	m := New(testLabels)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		// A retry far in the future, so that "c" is counted as a retry and not yet as an add.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "proxies", MetricsProvider: m.WorkqueueProvider()},
	)
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // deduplicated: not an add
	item, _ := q.Get()
	q.Done(item)
	q.AddRateLimited("c")

	name := map[string]string{"name": "proxies"}
	got := map[string]float64{
		"depth":   gaugeValue(t, m, "workqueue_depth", name),
		"adds":    gaugeValue(t, m, "workqueue_adds_total", name),
		"retries": gaugeValue(t, m, "workqueue_retries_total", name),
	}
	want := map[string]float64{"depth": 1, "adds": 2, "retries": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("workqueue metrics (-want +got):\n%s", diff)
	}
	count, _ := histogramTotals(t, m.workqueue.workDuration)
	if count != 1 {
		t.Errorf("workqueue_work_duration_seconds count = %v, want 1", count)
	}
	count, _ = histogramTotals(t, m.workqueue.latency)
	if count != 1 {
		t.Errorf("workqueue_queue_duration_seconds count = %v, want 1", count)
	}
}

func TestHandler(t *testing.T) {
	m := New(testLabels)
	m.SetBuildInfo("v1.2.3")
	m.SetLeader(true)
	m.WatchProxies(newLister(t, newProxy("a", "ns", crawlv1alpha1.PhaseReady)), "")
	m.ObserveSync("success", time.Millisecond)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	for _, want := range []string{
		`proxy_operator_build_info{version="v1.2.3"} 1`,
		`proxy_operator_leader 1`,
		`proxy_operator_proxies{namespace="ns",phase="Ready"} 1`,
		`proxy_operator_reconcile_total{result="success"} 1`,
		`proxy_operator_reconcile_duration_seconds_count{result="success"} 1`,
		`go_goroutines `,
		`process_start_time_seconds `,
		`promhttp_metric_handler_requests_total{code="200"} `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

// Two Metrics in one process must not collide: the registry is private.
func TestNewTwice(t *testing.T) {
	a, b := New(testLabels), New(testLabels)
	a.SetLeader(true)
	if got := testutil.ToFloat64(b.leader); got != 0 {
		t.Errorf("leader of a second Metrics = %v, want 0", got)
	}
}

func TestLint(t *testing.T) {
	m := New(testLabels)
	m.SetBuildInfo("dev")
	problems, err := testutil.GatherAndLint(m.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "go_") || strings.HasPrefix(p.Metric, "process_") {
			continue // not ours
		}
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func newProxy(name, namespace string, phase crawlv1alpha1.ProxyPhase) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Status:     crawlv1alpha1.ProxyStatus{Phase: phase},
	}
}

func newLister(t *testing.T, proxies ...*crawlv1alpha1.Proxy) crawllisters.ProxyLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range proxies {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return crawllisters.NewProxyLister(indexer)
}

// collect returns every series c exports.
func collect(t *testing.T, c prometheus.Collector) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range families {
		out = append(out, f.GetMetric()...)
	}
	return out
}

func labelsOf(s *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range s.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// gaugeValue reads the one series of the named gauge or counter with labels
// from the registry.
func gaugeValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if cmp.Equal(labelsOf(s), labels) {
				if s.GetGauge() != nil {
					return s.GetGauge().GetValue()
				}
				return s.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// histogramTotals sums the sample count and sum over every series of h.
func histogramTotals(t *testing.T, h prometheus.Collector) (count, sum float64) {
	t.Helper()
	for _, s := range collect(t, h) {
		count += float64(s.GetHistogram().GetSampleCount())
		sum += s.GetHistogram().GetSampleSum()
	}
	return count, sum
}

func TestPerProxyProbeSeries(t *testing.T) {
	a, b := cache.NewObjectName("crawl", "a"), cache.NewObjectName("crawl", "b")
	started := time.Unix(1700000000, 500_000_000)
	const header = `
# HELP proxy_operator_probe_consecutive_failures Failed probes in a row of a proxy; the verdict turns Unhealthy at spec.healthCheck.failureThreshold.
# TYPE proxy_operator_probe_consecutive_failures gauge
`
	const lastHeader = `# HELP proxy_operator_probe_last_timestamp_seconds Unix time the latest probe of a proxy started, whatever its result: the true probe recency (status.lastHealthCheckTime moves only on a reported verdict).
# TYPE proxy_operator_probe_last_timestamp_seconds gauge
`
	tests := map[string]struct {
		do   func(m *Metrics)
		want string
	}{
		"nothing probed exports nothing": {do: func(*Metrics) {}, want: ""},
		"each proxy its own series": {
			do: func(m *Metrics) {
				m.ObserveProbe(a, "success", time.Millisecond, started)
				m.SetConsecutiveFailures(a, 0)
				m.ObserveProbe(b, "timeout", time.Second, started.Add(time.Second))
				m.SetConsecutiveFailures(b, 2)
			},
			want: header + `proxy_operator_probe_consecutive_failures{name="a",namespace="crawl"} 0
proxy_operator_probe_consecutive_failures{name="b",namespace="crawl"} 2
` + lastHeader + `proxy_operator_probe_last_timestamp_seconds{name="a",namespace="crawl"} 1.7000000005e+09
proxy_operator_probe_last_timestamp_seconds{name="b",namespace="crawl"} 1.7000000015e+09
`,
		},
		"a later probe replaces the values": {
			do: func(m *Metrics) {
				m.ObserveProbe(a, "timeout", time.Second, started)
				m.SetConsecutiveFailures(a, 1)
				m.ObserveProbe(a, "success", time.Millisecond, started.Add(time.Minute))
				m.SetConsecutiveFailures(a, 0)
			},
			want: header + `proxy_operator_probe_consecutive_failures{name="a",namespace="crawl"} 0
` + lastHeader + `proxy_operator_probe_last_timestamp_seconds{name="a",namespace="crawl"} 1.7000000605e+09
`,
		},
		"a forgotten proxy's series are gone": {
			do: func(m *Metrics) {
				m.ObserveProbe(a, "success", time.Millisecond, started)
				m.SetConsecutiveFailures(a, 0)
				m.ObserveProbe(b, "success", time.Millisecond, started)
				m.SetConsecutiveFailures(b, 0)
				m.ForgetProxy(a)
			},
			want: header + `proxy_operator_probe_consecutive_failures{name="b",namespace="crawl"} 0
` + lastHeader + `proxy_operator_probe_last_timestamp_seconds{name="b",namespace="crawl"} 1.7000000005e+09
`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := New(testLabels)
			tc.do(m)
			if err := testutil.CollectAndCompare(m.health.probed, strings.NewReader(tc.want)); err != nil {
				t.Error(err)
			}
		})
	}
}
