package health

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const (
	testNamespace = "ns"
	testInterval  = 10 * time.Second
	testTick      = time.Second
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// proxyOption adjusts a fixture Proxy.
type proxyOption func(*crawlv1alpha1.Proxy)

// testProxy is an External proxy at 127.0.0.1:<port> with an address in
// status, probed every testInterval, thresholds 1 and 3.
func testProxy(name string, opts ...proxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: types.UID(name + "-uid-1")},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 3128},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:              "http://127.0.0.1:1/generate_204",
				Interval:         &metav1.Duration{Duration: testInterval},
				Timeout:          &metav1.Duration{Duration: time.Second},
				SuccessThreshold: 1,
				FailureThreshold: 3,
			},
		},
		Status: crawlv1alpha1.ProxyStatus{IP: "127.0.0.1", Port: 3128},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withThresholds(success, failure int32) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.HealthCheck.SuccessThreshold, p.Spec.HealthCheck.FailureThreshold = success, failure
	}
}

func withAddress(ip string, port int32) proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Status.IP, p.Status.Port = ip, port }
}

func withUID(uid string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.UID = types.UID(uid) }
}

func withAuth(secret string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

func deleting() proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.DeletionTimestamp = &metav1.Time{Time: t0} }
}

// withHealthyCondition is the status a previous leader wrote.
func withHealthyCondition(status metav1.ConditionStatus, message string, latency time.Duration, checked time.Time) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionHealthy, Status: status, Reason: "ProbeSucceeded", Message: message,
		})
		p.Status.LatencyMillis = latency.Milliseconds()
		p.Status.LastHealthCheckTime = &metav1.Time{Time: checked}
	}
}

// fixture drives an Engine synchronously: each step moves the fake clock,
// runs one scheduler tick, and records the dispatched probes at once with
// scripted results.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	engine  *Engine
	clock   *testingclock.FakeClock
	store   cache.Indexer
	metrics *recordingMetrics

	mu       sync.Mutex
	enqueued map[cache.ObjectName]int
}

func newFixture(t *testing.T, proxies ...*crawlv1alpha1.Proxy) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	f := &fixture{
		t:        t,
		ctx:      ctx,
		clock:    testingclock.NewFakeClock(t0),
		store:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		metrics:  newRecordingMetrics(),
		enqueued: map[cache.ObjectName]int{},
	}
	for _, p := range proxies {
		f.put(p)
	}
	e, err := New(Config{
		// The fixture's proxies share one address; the bound on it has
		// tests of its own (endpoint_test.go).
		MaxProbesPerEndpoint: 1 << 20,
		Proxies:              f.store,
		Enqueue: func(key cache.ObjectName) {
			f.mu.Lock()
			f.enqueued[key]++
			f.mu.Unlock()
		},
		Tick:    testTick,
		Clock:   f.clock,
		Metrics: f.metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.jitter = rand.New(rand.NewPCG(1, 2))
	f.engine = e
	return f
}

func (f *fixture) put(p *crawlv1alpha1.Proxy) {
	f.t.Helper()
	if err := f.store.Update(p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) remove(name string) {
	f.t.Helper()
	if err := f.store.Delete(testProxy(name)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) enqueues(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enqueued[cache.NewObjectName(testNamespace, name)]
}

// tick runs the scheduler at the clock's time and returns the jobs it
// dispatched, without running them.
func (f *fixture) tick() []job {
	var jobs []job
	f.engine.schedule(f.ctx, f.clock.Now(), func(j job) bool {
		jobs = append(jobs, j)
		return true
	})
	return jobs
}

// step moves the clock by d, ticks, and records each dispatched probe with
// result(name); it returns the names probed.
func (f *fixture) step(d time.Duration, result func(name string) Result) []string {
	f.clock.Step(d)
	var probed []string
	for _, j := range f.tick() {
		now := f.clock.Now()
		f.engine.record(f.ctx, j, result(j.key.Name), now, now)
		probed = append(probed, j.key.Name)
	}
	return probed
}

// checkDue moves the clock by d, ticks, and runs each dispatched probe
// through runCheck (credentials, the engine's probe) before recording it;
// it returns the class of the last result.
func (f *fixture) checkDue(d time.Duration) (class string) {
	f.clock.Step(d)
	for _, j := range f.tick() {
		r := f.engine.runCheck(f.ctx, j)
		class = r.Class
		f.engine.record(f.ctx, j, r, f.clock.Now(), f.clock.Now())
	}
	return class
}

func (f *fixture) verdict(name string) (Verdict, bool) {
	return f.engine.Verdict(cache.NewObjectName(testNamespace, name))
}

func success(latency time.Duration) Result {
	return Result{OK: true, Class: ResultSuccess, Message: fmt.Sprintf("target answered 204 in %s", latency), Latency: latency}
}

func failure(msg string) Result {
	return Result{Class: ResultConnectError, Message: msg, Latency: time.Millisecond}
}

func always(r Result) func(string) Result { return func(string) Result { return r } }

// recordingMetrics keeps what the engine measured.
type recordingMetrics struct {
	mu        sync.Mutex
	probes    map[string]int // by result
	lastProbe map[cache.ObjectName]time.Time
	failures  map[cache.ObjectName]int
	forgotten map[cache.ObjectName]int
	byVerdict [3]int // healthy, unhealthy, unknown
	delays    []time.Duration
	skipped   int
	reports   map[string]int // by why
}

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{
		probes:    map[string]int{},
		lastProbe: map[cache.ObjectName]time.Time{},
		failures:  map[cache.ObjectName]int{},
		forgotten: map[cache.ObjectName]int{},
		reports:   map[string]int{},
	}
}

func (m *recordingMetrics) ObserveProbe(key cache.ObjectName, result string, _ time.Duration, started time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probes[result]++
	m.lastProbe[key] = started
}

func (m *recordingMetrics) SetConsecutiveFailures(key cache.ObjectName, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures[key] = n
}

func (m *recordingMetrics) ForgetProxy(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgotten[key]++
	delete(m.lastProbe, key)
	delete(m.failures, key)
}

func (m *recordingMetrics) SetProxiesByVerdict(healthy, unhealthy, unknown int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byVerdict = [3]int{healthy, unhealthy, unknown}
}

func (m *recordingMetrics) ObserveScheduleDelay(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delays = append(m.delays, d)
}

func (m *recordingMetrics) ProbeDispatchSkipped() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.skipped++
}

func (m *recordingMetrics) ObserveReport(why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reports[why]++
}

// TestThresholds drives one proxy through probe results and checks, after
// each probe, the reported verdict and the number of Enqueue calls.
func TestThresholds(t *testing.T) {
	ok := success(10 * time.Millisecond)
	bad := failure("connecting to the proxy: connection refused")
	type after struct {
		Reported *bool // nil: no reported verdict
		Enqueues int
	}
	yes, no := new(bool), new(bool)
	*yes = true
	tests := map[string]struct {
		success, failure int32
		results          []Result
		want             []after
	}{
		"new proxy: healthy only at successThreshold": {
			success: 2, failure: 3,
			results: []Result{ok, ok, ok},
			want:    []after{{nil, 0}, {yes, 1}, {yes, 1}},
		},
		"new proxy: unhealthy only at failureThreshold": {
			success: 1, failure: 3,
			results: []Result{bad, bad, bad, bad},
			want:    []after{{nil, 0}, {nil, 0}, {no, 1}, {no, 1}},
		},
		"healthy to unhealthy at failureThreshold, a success restarts the run": {
			success: 1, failure: 2,
			results: []Result{ok, bad, ok, bad, bad, bad},
			want:    []after{{yes, 1}, {yes, 1}, {yes, 1}, {yes, 1}, {no, 2}, {no, 2}},
		},
		"unhealthy back to healthy at successThreshold": {
			success: 2, failure: 1,
			results: []Result{bad, ok, bad, ok, ok, ok},
			want:    []after{{no, 1}, {no, 1}, {no, 1}, {no, 1}, {yes, 2}, {yes, 2}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p", withThresholds(tc.success, tc.failure)))
			f.tick() // first sight: the first probe is due within one interval
			var got []after
			for i, r := range tc.results {
				probed := f.step(testInterval, always(r))
				if len(probed) != 1 {
					t.Fatalf("step %d probed %v, want exactly p", i, probed)
				}
				a := after{Enqueues: f.enqueues("p")}
				if v, ok := f.verdict("p"); ok {
					a.Reported = &v.Healthy
				}
				got = append(got, a)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("after each probe (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReportedSnapshot: the reported verdict carries the address, the
// message, the latency (healthy only) and the probe's start time.
func TestReportedSnapshot(t *testing.T) {
	f := newFixture(t, testProxy("p", withAddress("127.0.0.9", 8080), withThresholds(1, 1)))
	f.tick()
	f.step(testInterval, always(success(42*time.Millisecond)))
	got, _ := f.verdict("p")
	want := Verdict{Address: "127.0.0.9:8080", Healthy: true, Message: "target answered 204 in 42ms",
		Latency: 42 * time.Millisecond, CheckedAt: f.clock.Now()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("healthy verdict (-want +got):\n%s", diff)
	}

	f.step(testInterval, always(Result{Class: ResultTimeout, Message: "timeout after 1s waiting for the response", Latency: time.Second}))
	got, _ = f.verdict("p")
	want = Verdict{Address: "127.0.0.9:8080", Healthy: false, Message: "timeout after 1s waiting for the response",
		CheckedAt: f.clock.Now()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unhealthy verdict (-want +got):\n%s", diff)
	}
}

// TestUnchangedVerdictIsNotReported: probes that agree with the verdict, and
// failures below the threshold, neither Enqueue nor move the snapshot.
func TestUnchangedVerdictIsNotReported(t *testing.T) {
	f := newFixture(t, testProxy("p"))
	f.tick()
	f.step(testInterval, always(success(10*time.Millisecond)))
	first, _ := f.verdict("p")
	if f.enqueues("p") != 1 {
		t.Fatalf("first verdict: %d enqueues, want 1", f.enqueues("p"))
	}
	results := []Result{
		success(12 * time.Millisecond), success(9 * time.Millisecond), success(25 * time.Millisecond),
		failure("connecting to the proxy: connection refused"), failure("timeout after 1s waiting for the response"),
		success(10 * time.Millisecond), success(10 * time.Millisecond),
	}
	for _, r := range results {
		f.step(testInterval, always(r))
	}
	if got := f.enqueues("p"); got != 1 {
		t.Errorf("%d enqueues after probes that agree with the verdict, want 1", got)
	}
	if got, _ := f.verdict("p"); !cmp.Equal(got, first) {
		t.Errorf("the reported snapshot moved: %+v, want %+v", got, first)
	}
	f.metrics.mu.Lock()
	defer f.metrics.mu.Unlock()
	if got, want := f.metrics.lastProbe[cache.NewObjectName(testNamespace, "p")], f.clock.Now(); !got.Equal(want) {
		t.Errorf("latest-probe metric = %v, want %v (every probe counts)", got, want)
	}
	if got := f.metrics.probes[ResultSuccess] + f.metrics.probes[ResultConnectError]; got != 1+len(results) {
		t.Errorf("%d probes observed, want %d", got, 1+len(results))
	}
}

// TestLatencyReportRateLimit: a material latency change is reported once it
// has persisted for latencyPersistence probes, at most once per
// MinReportInterval; an immaterial one never.
func TestLatencyReportRateLimit(t *testing.T) {
	f := newFixture(t, testProxy("p"))
	f.tick()
	f.step(testInterval, always(success(100*time.Millisecond))) // first verdict at T
	reportedAt := f.clock.Now()

	steps := []struct {
		latency     time.Duration
		wantReports int
		wantLatency time.Duration
	}{
		{140 * time.Millisecond, 1, 100 * time.Millisecond}, // T+10s, +40%: immaterial
		{300 * time.Millisecond, 1, 100 * time.Millisecond}, // T+20s, material: not yet persisted (1 of 5)
		{300 * time.Millisecond, 1, 100 * time.Millisecond}, // T+30s
		{300 * time.Millisecond, 1, 100 * time.Millisecond}, // T+40s
		{300 * time.Millisecond, 1, 100 * time.Millisecond}, // T+50s
		{300 * time.Millisecond, 2, 300 * time.Millisecond}, // T+60s: persisted, a minute after T: reported
		{20 * time.Millisecond, 2, 300 * time.Millisecond},  // T+70s: material again, not persisted
		{20 * time.Millisecond, 2, 300 * time.Millisecond},  // T+80s
		{20 * time.Millisecond, 2, 300 * time.Millisecond},  // T+90s
		{20 * time.Millisecond, 2, 300 * time.Millisecond},  // T+100s
		{20 * time.Millisecond, 2, 300 * time.Millisecond},  // T+110s: persisted, 50s after the last report: rate-limited
		{20 * time.Millisecond, 3, 20 * time.Millisecond},   // T+120s: reported
	}
	for i, s := range steps {
		f.step(testInterval, always(success(s.latency)))
		v, _ := f.verdict("p")
		if got := f.enqueues("p"); got != s.wantReports || v.Latency != s.wantLatency {
			t.Errorf("probe %d at T+%v with %v: %d reports, reported latency %v; want %d, %v",
				i, f.clock.Now().Sub(reportedAt), s.latency, got, v.Latency, s.wantReports, s.wantLatency)
		}
	}
}

// TestLatencyReportBudget: reports of a latency change alone share one
// fleet-wide budget (a burst, then DefaultLatencyReportsPerSecond); first
// verdicts are never held back by it, and a held-back change is reported
// by a later probe once the budget refills.
func TestLatencyReportBudget(t *testing.T) {
	const n = 50
	var proxies []*crawlv1alpha1.Proxy
	for i := range n {
		proxies = append(proxies, testProxy(fmt.Sprintf("p%02d", i)))
	}
	f := newFixture(t, proxies...)
	// This test is about the cap: the share per proxy is set so high that
	// the cap binds (TestLatencyBudgetScalesWithFleet tests the share).
	f.engine.latencyPerProxyHour = 1e6
	total := func() int {
		sum := 0
		for i := range n {
			sum += f.enqueues(fmt.Sprintf("p%02d", i))
		}
		return sum
	}
	f.tick()
	f.step(testInterval, always(success(100*time.Millisecond))) // every first probe is due by now
	if got := total(); got != n {
		t.Fatalf("%d first verdicts reported, want all %d (not budgeted)", got, n)
	}

	// Every proxy moves to 300ms; the first probes of the new latency come
	// within the report interval, so nothing is reported (and the change
	// has persisted) when, a minute after the first verdicts, every proxy
	// is due at once with it.
	for range latencyPersistence - 1 {
		f.step(testInterval, always(success(300*time.Millisecond)))
	}
	if got := total() - n; got != 0 {
		t.Fatalf("%d latency reports within the report interval, want 0", got)
	}
	f.step(DefaultMinReportInterval-(latencyPersistence-1)*testInterval, always(success(300*time.Millisecond)))
	if got := total() - n; got != latencyReportBurst {
		t.Errorf("%d latency reports at once, want the burst of %d", got, latencyReportBurst)
	}
	// One interval later the bucket has refilled by rate × interval (capped
	// at the burst); the changes held back are reported then.
	f.step(testInterval, always(success(300*time.Millisecond)))
	refill := min(latencyReportBurst, int(DefaultLatencyReportsPerSecond*testInterval.Seconds()))
	if got := total() - n; got != latencyReportBurst+refill {
		t.Errorf("%d latency reports after one more interval, want %d", got, latencyReportBurst+refill)
	}
	f.step(testInterval, always(success(300*time.Millisecond)))
	if got := total() - n; got != n {
		t.Errorf("%d latency reports after two more intervals, want one per proxy (%d)", got, n)
	}
}

// TestLatencyBudgetScalesWithFleet: however noisy the latencies, the
// fleet's latency-only reports average at most
// DefaultLatencyReportsPerProxyHour per proxy per hour, after the burst
// (docs/decisions/0122-latency-budget-scales-fleet-at-most.md); flips are never held back by it.
func TestLatencyBudgetScalesWithFleet(t *testing.T) {
	const n, hours = 50, 2
	var proxies []*crawlv1alpha1.Proxy
	for i := range n {
		proxies = append(proxies, testProxy(fmt.Sprintf("p%02d", i)))
	}
	f := newFixture(t, proxies...)
	total := func() int {
		sum := 0
		for i := range n {
			sum += f.enqueues(fmt.Sprintf("p%02d", i))
		}
		return sum
	}
	f.tick()
	f.step(testInterval, always(success(100*time.Millisecond)))
	if got := total(); got != n {
		t.Fatalf("%d first verdicts, want %d", got, n)
	}
	// Every proxy's latency moves between 100ms and 400ms every
	// latencyPersistence probes: each move persists and is material, so
	// every proxy would be reported once per MinReportInterval.
	probes := 0
	latency := func(string) Result {
		if (probes/latencyPersistence)%2 == 1 {
			return success(400 * time.Millisecond)
		}
		return success(100 * time.Millisecond)
	}
	for range hours * time.Hour / testInterval {
		probes++
		f.step(testInterval, latency)
	}
	budget := latencyReportBurst + n*DefaultLatencyReportsPerProxyHour*hours
	if got := total() - n; got > budget || got < budget-latencyReportBurst {
		t.Errorf("%d latency reports in %dh from %d noisy proxies, want between %d and %d (the burst plus %d per proxy per hour)",
			got, hours, n, budget-latencyReportBurst, budget, DefaultLatencyReportsPerProxyHour)
	}
	// A flip is reported at once, budget or not.
	before := total()
	for range 3 { // failureThreshold 3
		f.step(testInterval, always(failure("connecting to the proxy: connection refused")))
	}
	if got := total() - before; got != n {
		t.Errorf("%d flips reported with the latency budget spent, want %d", got, n)
	}
	// Every report was counted by why, for the operator's
	// proxy_operator_health_reports_total.
	f.metrics.mu.Lock()
	defer f.metrics.mu.Unlock()
	want := map[string]int{reportFirstVerdict: n, reportLatency: before - n, reportFlip: n}
	if diff := cmp.Diff(want, f.metrics.reports); diff != "" {
		t.Errorf("reports counted by why (-want +got):\n%s", diff)
	}
}

// TestJitterSpread: the first probes of a fleet seen at once spread evenly
// over the first interval instead of bunching in one tick.
func TestJitterSpread(t *testing.T) {
	const n = 1000
	var proxies []*crawlv1alpha1.Proxy
	for i := range n {
		proxies = append(proxies, testProxy(fmt.Sprintf("p%04d", i)))
	}
	f := newFixture(t, proxies...)
	perTick := []int{len(f.tick())}
	for range testInterval / testTick {
		perTick = append(perTick, len(f.step(testTick, always(success(time.Millisecond)))))
	}
	// Tick k dispatches the probes due in ((k-1)s, ks]: ~n/10 for k = 1..10.
	total := 0
	for _, c := range perTick {
		total += c
	}
	if total != n {
		t.Fatalf("%d first probes within one interval, want %d (per tick: %v)", total, n, perTick)
	}
	want := n / int(testInterval/testTick)
	for k, c := range perTick[1:] {
		if c < want/2 || c > want*3/2 {
			t.Errorf("tick %d dispatched %d first probes, want about %d (per tick: %v)", k+1, c, want, perTick)
		}
	}
	if perTick[0] > want/10 {
		t.Errorf("the first tick dispatched %d probes: bunched (per tick: %v)", perTick[0], perTick)
	}
	// The next round keeps the spread: each proxy is probed once more per interval.
	again := 0
	for range testInterval / testTick {
		again += len(f.step(testTick, always(success(time.Millisecond))))
	}
	if again != n {
		t.Errorf("second interval probed %d proxies, want %d", again, n)
	}
}

// TestNewProxyProbedAtOnce: a proxy created while the engine runs is probed
// at the first tick that meets it, not somewhere in its first interval
// (docs/decisions/0121-proxy-created-while-engine-runs-probed.md); the fleet met on the first pass keeps its spread, and the
// new proxy then keeps its own cadence.
func TestNewProxyProbedAtOnce(t *testing.T) {
	const n = 100
	var proxies []*crawlv1alpha1.Proxy
	for i := range n {
		proxies = append(proxies, testProxy(fmt.Sprintf("p%03d", i)))
	}
	f := newFixture(t, proxies...)
	first := len(f.tick())
	if first > n/int(testInterval/testTick) {
		t.Fatalf("the first pass dispatched %d of %d probes at once, want them spread over the interval", first, n)
	}
	f.step(testTick, always(success(time.Millisecond)))

	f.put(testProxy("new"))
	probed := f.step(testTick, always(success(time.Millisecond)))
	if !slices.Contains(probed, "new") {
		t.Fatalf("the tick after the new proxy appeared probed %v, want it among them", probed)
	}
	if v, ok := f.verdict("new"); !ok || !v.Healthy {
		t.Errorf("verdict of the new proxy after its first probe: %+v, %v; want healthy (success threshold 1)", v, ok)
	}
	var again []time.Duration
	start := f.clock.Now()
	for range 2 * testInterval / testTick {
		if slices.Contains(f.step(testTick, always(success(time.Millisecond))), "new") {
			again = append(again, f.clock.Now().Sub(start))
		}
	}
	if want := []time.Duration{testInterval, 2 * testInterval}; !slices.Equal(again, want) {
		t.Errorf("the new proxy was probed again after %v, want %v (one interval apart)", again, want)
	}
}

// TestSeedFromHealthyCondition: after a leader handover, a proxy's verdict
// starts from the condition the previous leader wrote; probes that agree
// report nothing, and the seeded snapshot reproduces the status exactly.
func TestSeedFromHealthyCondition(t *testing.T) {
	checked := t0.Add(-20 * time.Second)
	bad := failure("connecting to the proxy: connection refused")
	tests := map[string]struct {
		opts        []proxyOption
		results     []Result
		wantEnqueue int
		wantHealthy bool
	}{
		"healthy status, successes: silent": {
			opts:        []proxyOption{withHealthyCondition(metav1.ConditionTrue, "target answered 204 in 5ms", 5*time.Millisecond, checked)},
			results:     []Result{success(6 * time.Millisecond), success(4 * time.Millisecond), success(7 * time.Millisecond)},
			wantEnqueue: 0, wantHealthy: true,
		},
		"unhealthy status, failures: silent": {
			opts:        []proxyOption{withHealthyCondition(metav1.ConditionFalse, "connecting to the proxy: connection refused", 0, checked)},
			results:     []Result{bad, bad, bad, bad},
			wantEnqueue: 0, wantHealthy: false,
		},
		"healthy status, failures below the threshold: silent": {
			opts:        []proxyOption{withHealthyCondition(metav1.ConditionTrue, "target answered 204 in 5ms", 5*time.Millisecond, checked)},
			results:     []Result{bad, bad},
			wantEnqueue: 0, wantHealthy: true,
		},
		"healthy status, failures at the threshold: a flip": {
			opts:        []proxyOption{withHealthyCondition(metav1.ConditionTrue, "target answered 204 in 5ms", 5*time.Millisecond, checked)},
			results:     []Result{bad, bad, bad},
			wantEnqueue: 1, wantHealthy: false,
		},
		"unhealthy status, a success: a flip": {
			opts:        []proxyOption{withHealthyCondition(metav1.ConditionFalse, "connecting to the proxy: connection refused", 0, checked)},
			results:     []Result{success(5 * time.Millisecond)},
			wantEnqueue: 1, wantHealthy: true,
		},
		"no condition: a first verdict": {
			results:     []Result{success(5 * time.Millisecond)},
			wantEnqueue: 1, wantHealthy: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := testProxy("p", tc.opts...)
			f := newFixture(t, p)
			f.tick()
			if len(p.Status.Conditions) > 0 {
				// Before any probe, the snapshot is exactly what status shows:
				// the controller applying it writes nothing.
				got, ok := f.verdict("p")
				cond := p.Status.Conditions[0]
				want := Verdict{Address: "127.0.0.1:3128", Healthy: cond.Status == metav1.ConditionTrue,
					Message: cond.Message, Latency: time.Duration(p.Status.LatencyMillis) * time.Millisecond, CheckedAt: checked}
				if diff := cmp.Diff(want, got); !ok || diff != "" {
					t.Errorf("seeded snapshot (ok=%v) (-want +got):\n%s", ok, diff)
				}
			}
			for _, r := range tc.results {
				f.step(testInterval, always(r))
			}
			if got := f.enqueues("p"); got != tc.wantEnqueue {
				t.Errorf("%d enqueues, want %d", got, tc.wantEnqueue)
			}
			if v, ok := f.verdict("p"); !ok || v.Healthy != tc.wantHealthy {
				t.Errorf("verdict %+v (ok=%v), want healthy=%v", v, ok, tc.wantHealthy)
			}
		})
	}
}

// TestStateReset: a proxy deleted, deleting, without an address, replaced
// (new UID) or moved (new address) loses its state and its verdict; a
// replacement starts with fresh counters and no seeded verdict.
func TestStateReset(t *testing.T) {
	tests := map[string]struct {
		change      func(f *fixture)
		wantTracked bool // the engine still probes the proxy
	}{
		"deleted from the cache": {change: func(f *fixture) { f.remove("p") }},
		"deleting":               {change: func(f *fixture) { f.put(testProxy("p", withThresholds(2, 3), deleting())) }},
		"no address any more":    {change: func(f *fixture) { f.put(testProxy("p", withThresholds(2, 3), withAddress("", 0))) }},
		"replaced: new UID": {
			change:      func(f *fixture) { f.put(testProxy("p", withThresholds(2, 3), withUID("p-uid-2"))) },
			wantTracked: true,
		},
		"moved: new address": {
			change:      func(f *fixture) { f.put(testProxy("p", withThresholds(2, 3), withAddress("127.0.0.2", 3128))) },
			wantTracked: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// The status says healthy too: a reset must not seed from it,
			// since it describes the predecessor.
			f := newFixture(t, testProxy("p", withThresholds(2, 3),
				withHealthyCondition(metav1.ConditionTrue, "target answered 204 in 5ms", 5*time.Millisecond, t0)))
			f.tick()
			f.step(testInterval, always(success(5*time.Millisecond)))
			f.step(testInterval, always(success(5*time.Millisecond)))
			// A probe of the old instance is in flight during the change.
			f.clock.Step(testInterval)
			inFlight := f.tick()
			if len(inFlight) != 1 {
				t.Fatalf("%d probes dispatched, want 1", len(inFlight))
			}

			tc.change(f)
			// A replaced or moved proxy is new to the engine: its first
			// probe goes at once (docs/decisions/0121-proxy-created-while-engine-runs-probed.md).
			fresh := f.tick()
			if _, ok := f.verdict("p"); ok {
				t.Error("the old verdict survived the change")
			}
			key := cache.NewObjectName(testNamespace, "p")
			f.metrics.mu.Lock()
			forgotten := f.metrics.forgotten[key]
			f.metrics.mu.Unlock()
			if forgotten != 1 {
				t.Errorf("ForgetProxy called %d times, want 1", forgotten)
			}
			// The old instance's result arrives late: it is dropped.
			now := f.clock.Now()
			f.engine.record(f.ctx, inFlight[0], failure("connecting to the proxy: connection refused"), now, now)
			if _, ok := f.verdict("p"); ok {
				t.Error("a result about the old instance made a verdict")
			}

			probes := len(fresh)
			for _, j := range fresh {
				f.engine.record(f.ctx, j, success(5*time.Millisecond), now, now)
			}
			probes += len(f.step(testInterval, always(success(5*time.Millisecond))))
			_, ok := f.verdict("p")
			if tc.wantTracked != (probes > 0) || tc.wantTracked != ok {
				t.Errorf("after the change: %d probes, verdict %v; want tracked=%v", probes, ok, tc.wantTracked)
			}
			if tc.wantTracked && probes != 2 {
				// Fresh counters: successThreshold 2 needs both.
				t.Errorf("%d probes before the new verdict, want 2", probes)
			}
		})
	}
}

// TestEditedIntervalAppliesFromNow: an edit of a proxy the engine tracks
// reaches its state at the next pass (the cache holds a new object), and a
// shorter interval applies from then, not after the old one runs out.
func TestEditedIntervalAppliesFromNow(t *testing.T) {
	f := newFixture(t, testProxy("p"))
	f.tick()
	if probed := f.step(testInterval, always(success(5*time.Millisecond))); len(probed) != 1 {
		t.Fatalf("%d probes in the first interval, want 1", len(probed))
	}
	const short = 2 * time.Second
	f.put(testProxy("p", func(p *crawlv1alpha1.Proxy) { p.Spec.HealthCheck.Interval = &metav1.Duration{Duration: short} }))
	var at []time.Duration // after the edit
	for step := time.Second; step <= testInterval; step += time.Second {
		if len(f.step(time.Second, always(success(5*time.Millisecond)))) > 0 {
			at = append(at, step)
		}
	}
	// The pass one tick after the edit meets it: the next probe is due
	// one short interval after that pass.
	if len(at) == 0 || at[0] > time.Second+short {
		t.Fatalf("probes after the edit at %v, want the first within %v", at, time.Second+short)
	}
	if len(at) < int(testInterval/short)-1 {
		t.Errorf("probes after the edit at %v: fewer than one every %v", at, short)
	}
}

// TestCheckFollowsTheObject: an edit of spec.healthCheck applies from the
// next probe, and a probe in flight keeps the check it was handed (decision
// 164).
func TestCheckFollowsTheObject(t *testing.T) {
	const edited = "http://127.0.0.1:2/edited"
	f := newFixture(t, testProxy("p"))
	f.tick()
	f.clock.Step(testInterval)
	first := f.tick()
	if len(first) != 1 {
		t.Fatalf("%d probes in the first interval, want 1", len(first))
	}
	f.put(testProxy("p", func(p *crawlv1alpha1.Proxy) { p.Spec.HealthCheck.URL = edited }))
	if during := f.tick(); len(during) != 0 {
		t.Fatalf("%d probes dispatched while one is in flight, want 0", len(during))
	}
	now := f.clock.Now()
	f.engine.record(f.ctx, first[0], success(5*time.Millisecond), now, now)
	f.clock.Step(testInterval)
	next := f.tick()
	if len(next) != 1 {
		t.Fatalf("%d probes in the interval after the edit, want 1", len(next))
	}
	got := []string{first[0].check.target.URL, next[0].check.target.URL}
	want := []string{testProxy("p").Spec.HealthCheck.URL, edited}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("URLs probed before and after the edit (-want +got):\n%s", diff)
	}
}

// TestPassPrunesWhatLeftTheCache: a pass keeps the state of every proxy
// still in the cache and forgets exactly those that left it, whatever else
// changed in the same pass (a pass counts the states it meets instead of
// building a set of the fleet, docs/decisions/0157-scheduling-pass-looks-again-only-at.md).
func TestPassPrunesWhatLeftTheCache(t *testing.T) {
	tests := map[string]struct {
		change     func(f *fixture)
		wantStates []string
		wantForgot []string
	}{
		"nothing changed": {change: func(*fixture) {}, wantStates: []string{"p", "q", "r"}},
		// The informer's update: another object, the same instance.
		"one updated": {change: func(f *fixture) { f.put(testProxy("q")) }, wantStates: []string{"p", "q", "r"}},
		"one deleted": {change: func(f *fixture) { f.remove("q") }, wantStates: []string{"p", "r"}, wantForgot: []string{"q"}},
		"one deleted, one created": {
			change:     func(f *fixture) { f.remove("q"); f.put(testProxy("s")) },
			wantStates: []string{"p", "r", "s"}, wantForgot: []string{"q"},
		},
		"two deleted, two created": {
			change: func(f *fixture) {
				f.remove("p")
				f.remove("r")
				f.put(testProxy("s"))
				f.put(testProxy("t"))
			},
			wantStates: []string{"q", "s", "t"}, wantForgot: []string{"p", "r"},
		},
		"one replaced, one deleted": {
			change:     func(f *fixture) { f.put(testProxy("p", withUID("p-uid-2"))); f.remove("r") },
			wantStates: []string{"p", "q"}, wantForgot: []string{"p", "r"},
		},
		"all deleted": {
			change:     func(f *fixture) { f.remove("p"); f.remove("q"); f.remove("r") },
			wantForgot: []string{"p", "q", "r"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p"), testProxy("q"), testProxy("r"))
			f.tick()
			f.tick() // a second pass over the same fleet keeps every state
			tc.change(f)
			f.tick()
			f.engine.mu.RLock()
			var states, byObject []string
			for key := range f.engine.states {
				states = append(states, key.Name)
			}
			// The pointer index holds each state once, under the object
			// its last pass met: none of a deleted or replaced object.
			for obj, st := range f.engine.byObject {
				if st.obj != obj || f.engine.states[st.key] != st {
					t.Errorf("byObject holds a stale entry for %s", st.key)
				}
				byObject = append(byObject, st.key.Name)
			}
			f.engine.mu.RUnlock()
			slices.Sort(byObject)
			if diff := cmp.Diff(tc.wantStates, byObject); diff != "" {
				t.Errorf("byObject after the pass (-want +got):\n%s", diff)
			}
			f.metrics.mu.Lock()
			var forgot []string
			for key, n := range f.metrics.forgotten {
				for range n {
					forgot = append(forgot, key.Name)
				}
			}
			f.metrics.mu.Unlock()
			slices.Sort(states)
			slices.Sort(forgot)
			if diff := cmp.Diff(tc.wantStates, states); diff != "" {
				t.Errorf("states after the pass (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantForgot, forgot); diff != "" {
				t.Errorf("proxies forgotten (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSaturatedPool: a due probe that finds the pool saturated stays due,
// is counted, and goes at a later tick, the most overdue first; its
// lateness is measured from its due time.
func TestSaturatedPool(t *testing.T) {
	f := newFixture(t, testProxy("p"), testProxy("q"))
	f.tick()
	refuse := func(job) bool { return false }
	for range testInterval / testTick {
		f.clock.Step(testTick)
		f.engine.schedule(f.ctx, f.clock.Now(), refuse)
	}
	f.metrics.mu.Lock()
	skipped := f.metrics.skipped
	f.metrics.mu.Unlock()
	if skipped == 0 {
		t.Fatal("no skipped dispatch counted")
	}

	// Room for one: the one due first goes.
	f.engine.mu.RLock()
	dues := map[string]time.Time{}
	for key, st := range f.engine.states {
		dues[key.Name] = st.due
	}
	f.engine.mu.RUnlock()
	wantFirst := "p"
	if dues["q"].Before(dues["p"]) {
		wantFirst = "q"
	}
	var first []job
	f.clock.Step(testTick)
	f.engine.schedule(f.ctx, f.clock.Now(), func(j job) bool {
		if len(first) == 1 {
			return false
		}
		first = append(first, j)
		return true
	})
	if len(first) != 1 || first[0].key.Name != wantFirst || !first[0].state.inFlight {
		t.Fatalf("dispatched %v; want %s (due at %v, the other at %v), in flight", first, wantFirst, dues["p"].Sub(t0), dues["q"].Sub(t0))
	}
	if late := f.clock.Now().Sub(first[0].due); late <= testTick {
		t.Errorf("the job is %v late, want more than the %v tick: it waited", late, testTick)
	}
	if more := f.tick(); len(more) != 1 || more[0].key.Name == wantFirst {
		t.Errorf("next tick dispatched %v, want only the other proxy (the first is in flight)", more)
	}
}

// noJitter makes rand.Int64N(n) return 0 for any n that is not a power of
// two (a source of constant 0 would make it loop forever): every new proxy
// is due at once.
type noJitter struct{}

func (noJitter) Uint64() uint64 { return 1 }

// TestRunQueuesMoreThanWorkers: one tick hands out more probes than there
// are workers; they queue and run without waiting for another tick.
func TestRunQueuesMoreThanWorkers(t *testing.T) {
	const workers, proxies = 2, 8 // the queue holds queueFactor × workers
	var all []*crawlv1alpha1.Proxy
	for i := range proxies {
		all = append(all, testProxy(fmt.Sprintf("p%d", i), withThresholds(1, 1)))
	}
	f := newFixture(t, all...)
	f.engine.workers = workers
	f.engine.jitter = rand.New(noJitter{})
	f.engine.probe = func(context.Context, Target) Result { return success(time.Millisecond) }
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.engine.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	// The clock never moves: only Run's first tick dispatches.
	err := poll(10*time.Second, time.Millisecond, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.enqueued) == proxies
	})
	if err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		t.Fatalf("%d of %d proxies probed in one tick with %d workers", len(f.enqueued), proxies, workers)
	}
}

// markedForProxies is the label that lets Proxies use a credentials Secret.
var markedForProxies = map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}

// TestCredentials: spec.auth credentials reach the probe in the proxy URL;
// a missing, unusable or unmarked Secret fails the check without a probe,
// with a message naming the Secret only.
func TestCredentials(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret-Pa55")},
	}
	tests := map[string]struct {
		secret      *corev1.Secret
		wantProxy   string // the proxy URL the probe got; "" when none
		wantMessage string
	}{
		"credentials from the Secret": {secret: secret, wantProxy: "http://alice:s3cret-Pa55@127.0.0.1:3128", wantMessage: "ok"},
		"missing Secret":              {wantMessage: `credentials Secret "creds" not found`},
		"Secret without a password": {
			secret:      &corev1.Secret{ObjectMeta: secret.ObjectMeta, Data: map[string][]byte{"username": []byte("alice")}},
			wantMessage: `credentials Secret "creds" key "password" is missing or empty`,
		},
		// docs/decisions/0230-credentials-secrets-opt-in-by-label.md: no probe at all with an unmarked Secret.
		"Secret not marked for proxies": {
			secret:      &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds"}, Data: secret.Data},
			wantMessage: `credentials Secret "creds" is not marked for proxy use: add the label crawl.proxyfleet.io/proxy-credentials: "true" to it (kubectl label secret creds crawl.proxyfleet.io/proxy-credentials=true)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p", withAuth("creds"), withThresholds(1, 1)))
			f.engine.secrets = func(_ context.Context, ns, name string) (*corev1.Secret, error) {
				if tc.secret == nil || ns != testNamespace || name != tc.secret.Name {
					return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
				}
				return tc.secret, nil
			}
			var gotProxy string
			f.engine.probe = func(_ context.Context, target Target) Result {
				gotProxy = target.Proxy.String()
				return Result{OK: true, Class: ResultSuccess, Message: "ok"}
			}
			f.tick()
			f.checkDue(testInterval)
			v, _ := f.verdict("p")
			if gotProxy != tc.wantProxy || v.Message != tc.wantMessage {
				t.Errorf("probe got proxy %q, verdict message %q; want %q, %q", gotProxy, v.Message, tc.wantProxy, tc.wantMessage)
			}
		})
	}
}

func managed() proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Spec.Mode, p.Spec.Endpoint = crawlv1alpha1.ModeManaged, nil }
}

// TestManagedInstanceMustRefuseAnonymous: a Managed proxy on its way to
// healthy is probed a second time without credentials, and one that
// answers that too is never healthy; External proxies and healthy ones are
// probed once.
func TestManagedInstanceMustRefuseAnonymous(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret-Pa55")},
	}
	type probeRound struct {
		Probes  []string // the userinfo of each probe's proxy URL, "-" for none
		Healthy bool
		Class   string
	}
	tests := map[string]struct {
		opts      []proxyOption
		anonymous Result // what the proxy answers without credentials
		want      []probeRound
	}{
		"Managed, refuses anonymous: healthy, then probed once": {
			opts: []proxyOption{managed(), withAuth("creds")}, anonymous: Result{Class: ResultProxyRefused, Message: "proxy answered 407 Proxy Authentication Required"},
			want: []probeRound{
				{Probes: []string{"alice", "-"}, Healthy: true, Class: ResultSuccess},
				{Probes: []string{"alice"}, Healthy: true, Class: ResultSuccess},
			},
		},
		"Managed, answers anonymous: never healthy": {
			opts: []proxyOption{managed(), withAuth("creds")}, anonymous: success(time.Millisecond),
			want: []probeRound{
				{Probes: []string{"alice", "-"}, Class: ResultOpen},
				{Probes: []string{"alice", "-"}, Class: ResultOpen},
			},
		},
		"a proxy network's session, whose super proxy answers anonymous: healthy, probed once": {
			opts: []proxyOption{managed(), asSession()}, anonymous: success(time.Millisecond),
			want: []probeRound{
				{Probes: []string{"alice"}, Healthy: true, Class: ResultSuccess},
				{Probes: []string{"alice"}, Healthy: true, Class: ResultSuccess},
			},
		},
		"External with auth, answers anonymous: healthy, probed once": {
			opts: []proxyOption{withAuth("creds")}, anonymous: success(time.Millisecond),
			want: []probeRound{
				{Probes: []string{"alice"}, Healthy: true, Class: ResultSuccess},
				{Probes: []string{"alice"}, Healthy: true, Class: ResultSuccess},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p", append(tc.opts, withThresholds(1, 1))...))
			f.engine.secrets = func(context.Context, string, string) (*corev1.Secret, error) { return secret, nil }
			f.engine.providers = provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
			var got []probeRound
			var probes []string
			f.engine.probe = func(_ context.Context, target Target) Result {
				if target.Proxy.User == nil {
					probes = append(probes, "-")
					return tc.anonymous
				}
				probes = append(probes, target.Proxy.User.Username())
				return success(time.Millisecond)
			}
			f.tick()
			for range tc.want {
				probes = nil
				class := f.checkDue(testInterval)
				v, _ := f.verdict("p")
				got = append(got, probeRound{Probes: probes, Healthy: v.Healthy, Class: class})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("probe rounds (-want +got):\n%s", diff)
			}
			if v, _ := f.verdict("p"); !v.Healthy && strings.Contains(v.Message, "s3cret") {
				t.Errorf("the verdict message holds the password: %q", v.Message)
			}
		})
	}
}

// TestOpenManagedInstanceIsNeverHealthy probes real proxies with the real
// probe: tinyproxy without authentication (software that ignores the
// credentials it is sent, as a careless cloud-init would install) is never
// healthy as a Managed instance; forward-proxy requiring the credentials is.
func TestOpenManagedInstanceIsNeverHealthy(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("gen-User"), "password": []byte("gen-Pa55word")},
	}
	tests := map[string]struct {
		start       func(testing.TB, proxytest.Options) *proxytest.Proxy
		opts        proxytest.Options
		wantHealthy bool
		wantClass   string
	}{
		"forward-proxy requiring the credentials": {start: proxytest.StartInProcess, opts: proxytest.Options{Username: "gen-User", Password: "gen-Pa55word"}, wantHealthy: true, wantClass: ResultSuccess},
		"tinyproxy open to anyone":                {start: proxytest.StartTinyproxy, wantClass: ResultOpen},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			proxy := tc.start(t, tc.opts)
			host, _, _ := net.SplitHostPort(proxy.Addr)
			p := testProxy("p", managed(), withAuth("creds"), withThresholds(1, 1), withAddress(host, int32(proxytest.Port(t, proxy.Addr))))
			p.Spec.HealthCheck.URL = target.URL + "/generate_204"
			f := newFixture(t, p)
			f.engine.secrets = func(context.Context, string, string) (*corev1.Secret, error) { return secret, nil }
			f.tick()
			class := f.checkDue(testInterval)
			v, _ := f.verdict("p")
			if class != tc.wantClass || v.Healthy != tc.wantHealthy {
				t.Errorf("probe result %q, healthy %v (%s); want %q, %v", class, v.Healthy, v.Message, tc.wantClass, tc.wantHealthy)
			}
		})
	}
}

// TestRun runs the engine's own loop on the fake clock: the ticker drives
// the scheduler, workers probe, the verdict is reported through Enqueue,
// and stopping forgets it.
func TestRun(t *testing.T) {
	f := newFixture(t, testProxy("p"), testProxy("q", withThresholds(1, 1)))
	f.engine.workers = 2
	f.engine.probe = func(_ context.Context, target Target) Result {
		return success(3 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.engine.Run(ctx) }()

	err := poll(10*time.Second, time.Millisecond, func() bool {
		if f.enqueues("p") == 1 && f.enqueues("q") == 1 {
			return true
		}
		if f.clock.HasWaiters() { // the ticker is waiting: move time on
			f.clock.Step(testTick)
		}
		return false
	})
	if err != nil {
		t.Fatalf("no verdicts reported: p %d, q %d enqueues", f.enqueues("p"), f.enqueues("q"))
	}
	if v, ok := f.verdict("p"); !ok || !v.Healthy {
		t.Errorf("verdict of p = %+v, %v; want healthy", v, ok)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, ok := f.verdict("p"); ok {
		t.Error("a stopped engine still serves a verdict")
	}
}

func TestNewValidates(t *testing.T) {
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	enqueue := func(cache.ObjectName) {}
	tests := map[string]struct {
		cfg     Config
		wantErr bool
	}{
		"minimal":          {cfg: Config{Proxies: store, Enqueue: enqueue}},
		"no store":         {cfg: Config{Enqueue: enqueue}, wantErr: true},
		"no enqueue":       {cfg: Config{Proxies: store}, wantErr: true},
		"negative workers": {cfg: Config{Proxies: store, Enqueue: enqueue, Workers: -1}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New: %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (e.workers != DefaultWorkers || e.tick != DefaultTick || e.minReportInterval != DefaultMinReportInterval) {
				t.Errorf("defaults not applied: workers %d, tick %v, min report interval %v", e.workers, e.tick, e.minReportInterval)
			}
		})
	}
}

// poll is eventually.Poll of cond for up to timeout; the caller words the
// failure.
func poll(timeout, interval time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return eventually.Poll(ctx, interval, eventually.Holds(func() (bool, string) { return cond(), "not yet" }))
}
