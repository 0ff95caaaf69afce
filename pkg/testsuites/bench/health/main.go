// Command bench measures the health engine against a fleet of loopback
// proxies: how many probes per second it achieves against its schedule
// (N proxies / interval), how late probes start after their due time, and
// what that costs in CPU and memory, beside a bare loop that runs the same
// probe function at the same concurrency as fast as it can (the limit).
//
//	go run ./pkg/testsuites/bench/health                    # 1,000 proxies for 20s, 10,000 for 30s
//	go run ./pkg/testsuites/bench/health -sizes 2000 -durations 10s -delay 100ms
//
// The fleet runs in a child process (this binary with -fleet, see
// pkg/testing/proxytest/fleet), so that the engine's CPU and RSS are its own: N
// listeners on 127.77.x.y, each an HTTP server that answers every request
// with 204 itself, as a proxy answering a plain-http probe would,
// optionally after -delay (a remote proxy's round trip). It prints a
// markdown table. It is a measurement, not a test: it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest/fleet"
)

func main() {
	var (
		sizes     = flag.String("sizes", "1000,10000", "fleet sizes, comma-separated")
		durations = flag.String("durations", "20s,30s", "how long the engine runs for each size, comma-separated")
		interval  = flag.Duration("interval", 10*time.Second, "spec.healthCheck.interval of every proxy")
		timeout   = flag.Duration("timeout", 5*time.Second, "spec.healthCheck.timeout of every proxy")
		workers   = flag.Int("workers", 0, "engine workers (0: health.DefaultWorkers)")
		tick      = flag.Duration("tick", 0, "scheduler tick (0: health.DefaultTick)")
		bare      = flag.Duration("bare", 5*time.Second, "how long the bare probe loop runs for each size")
		delay     = flag.Duration(fleet.DelayFlag, 0, "how long each fleet proxy waits before answering")
		fleetSize = flag.Int(fleet.SizeFlag, 0, "internal: serve a fleet of this many proxies and print their addresses")
	)
	klog.InitFlags(nil)
	flag.Parse()
	fleet.ServeIfChild(*fleetSize, *delay)
	ns, err := fleet.ParseSizes(*sizes)
	if err != nil {
		fail(err)
	}
	ds, err := parseDurations(*durations)
	if err != nil || len(ds) != len(ns) {
		fail(fmt.Errorf("-durations needs one duration per size: %v", err))
	}
	if *workers == 0 {
		*workers = health.DefaultWorkers
	}
	if *tick == 0 {
		*tick = health.DefaultTick
	}
	if err := fleet.RaiseFileLimit(); err != nil {
		fail(err)
	}

	fmt.Printf("health engine benchmark: %s, GOMAXPROCS %d, %d CPUs; interval %v, timeout %v, tick %v, %d workers, fleet delay %v\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), *interval, *timeout, *tick, *workers, *delay)
	var rows []row
	for i, n := range ns {
		r, err := measure(n, ds[i], *bare, *interval, *timeout, *tick, *workers, *delay)
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	printTable(rows)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// row is one fleet size's measurements.
type row struct {
	proxies                int
	interval               time.Duration
	workers                int
	run                    time.Duration
	expected, achieved     float64 // probes/s
	failed                 int
	lateP50, lateP99, late time.Duration
	skipped                int
	cpu                    float64 // cores
	cpuPerProbe            time.Duration
	rssMiB                 float64
	bareRate, bareCPU      float64
	fleetCPU               float64 // cores, during the engine run
}

func measure(n int, run, bare, interval, timeout, tick time.Duration, workers int, delay time.Duration) (row, error) {
	r := row{proxies: n, interval: interval, workers: workers, run: run, expected: float64(n) / interval.Seconds()}
	fl, addrs, err := fleet.Start(n, delay)
	if err != nil {
		return r, err
	}
	defer fl.Stop()

	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	targets := make([]health.Target, len(addrs))
	for i, addr := range addrs {
		p := benchProxy(i, addr, interval, timeout)
		if err := store.Add(p); err != nil {
			return r, err
		}
		targets[i] = health.Target{Proxy: &url.URL{Scheme: "http", Host: addr}, URL: p.Spec.HealthCheck.URL,
			ExpectedStatus: 204, Timeout: timeout}
	}

	// The engine, for `run`.
	// Probes are counted over a steady window: after one interval every
	// proxy has had its (jittered) first probe and keeps its cadence.
	warmup := interval
	if warmup >= run {
		warmup = 0
	}
	m := &benchMetrics{}
	engine, err := health.New(health.Config{
		Proxies: crawllisters.NewProxyLister(store),
		Enqueue: func(cache.ObjectName) {},
		Workers: workers,
		Tick:    tick,
		Metrics: m,
		Logger:  klog.Background().V(1), // quiet
	})
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rss := sampleRSS(ctx)
	cpu0, fleet0 := cpuSeconds(), fl.CPUSeconds()
	start := time.Now()
	done := make(chan error, 1)
	m.windowStart = start.Add(warmup)
	go func() { done <- engine.Run(ctx) }()
	time.Sleep(run)
	m.freeze()
	elapsed := time.Since(start)
	cpu1, fleet1 := cpuSeconds(), fl.CPUSeconds()
	window := elapsed - warmup
	cancel()
	if err := <-done; err != nil {
		return r, err
	}
	r.rssMiB = float64(<-rss) / (1 << 20)
	r.cpu = (cpu1 - cpu0) / elapsed.Seconds()
	r.fleetCPU = (fleet1 - fleet0) / elapsed.Seconds()
	r.achieved = float64(m.probes) / window.Seconds()
	r.cpuPerProbe = time.Duration((cpu1 - cpu0) / float64(m.all) * float64(time.Second))
	r.failed, r.skipped = m.failed, m.skipped
	r.lateP50, r.lateP99, r.late = m.lateness()

	// The bare loop: the same probe, the same concurrency, no schedule.
	var count atomic.Int64
	bareCtx, bareCancel := context.WithTimeout(context.Background(), bare)
	defer bareCancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 = cpuSeconds()
	start = time.Now()
	for range workers {
		wg.Go(func() {
			for bareCtx.Err() == nil {
				t := targets[int(next.Add(1))%len(targets)]
				if res := health.Probe(bareCtx, t); res.OK {
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	r.bareRate = float64(count.Load()) / elapsed.Seconds()
	r.bareCPU = (cpuSeconds() - cpu0) / elapsed.Seconds()
	return r, nil
}

func benchProxy(i int, addr string, interval, timeout time.Duration) *crawlv1alpha1.Proxy {
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	name := fmt.Sprintf("px-%05d", i)
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID(name)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: int32(portNum)},
			HealthCheck: crawlv1alpha1.HealthCheck{
				// Never dialled: the fleet's proxies answer themselves.
				URL:            "http://127.0.0.1:9/generate_204",
				ExpectedStatus: 204,
				Interval:       &metav1.Duration{Duration: interval},
				Timeout:        &metav1.Duration{Duration: timeout},
			},
		},
		Status: crawlv1alpha1.ProxyStatus{IP: host, Port: int32(portNum)},
	}
}

// benchMetrics counts probes (all, and those started in the window) and
// keeps every schedule delay until frozen.
type benchMetrics struct {
	health.NoMetrics
	windowStart    time.Time
	mu             sync.Mutex
	frozen         bool
	all            int
	probes, failed int
	skipped        int
	delays         []time.Duration
}

func (m *benchMetrics) ObserveProbe(_ cache.ObjectName, result string, _ time.Duration, started time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		return
	}
	m.all++
	if started.Before(m.windowStart) {
		return
	}
	m.probes++
	if result != health.ResultSuccess {
		m.failed++
	}
}

func (m *benchMetrics) ObserveScheduleDelay(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.frozen {
		m.delays = append(m.delays, d)
	}
}

func (m *benchMetrics) ProbeDispatchSkipped() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.frozen {
		m.skipped++
	}
}

func (m *benchMetrics) ObserveReport(string) {}

func (m *benchMetrics) freeze() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.frozen = true
}

func (m *benchMetrics) lateness() (p50, p99, maximum time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.delays) == 0 {
		return 0, 0, 0
	}
	d := slices.Clone(m.delays)
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.50), at(0.99), d[len(d)-1]
}

// cpuPerProbeTarget is issue 16's bound on the engine's CPU per probe, as
// a multiple of the bare loop's.
const cpuPerProbeTarget = 1.1

func printTable(rows []row) {
	fmt.Println("| proxies | interval | workers | run | expected probes/s | engine probes/s | achieved | failed | lateness p50 | p99 | max | skipped dispatches | engine CPU (cores) | CPU per probe | engine RSS (MiB) | bare loop probes/s | bare loop CPU (cores) | bare loop CPU per probe | engine ÷ bare, CPU per probe | target | fleet CPU (cores) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		// The bare loop's CPU per probe: its cores over its probes/s.
		barePerProbe := time.Duration(r.bareCPU / r.bareRate * float64(time.Second))
		fmt.Printf("| %d | %v | %d | %v | %.1f | %.1f | %.1f%% | %d | %v | %v | %v | %d | %.3f | %v | %.0f | %.0f | %.2f | %v | %.2f× | ≤ %.1f× | %.2f |\n",
			r.proxies, r.interval, r.workers, r.run, r.expected, r.achieved, 100*r.achieved/r.expected, r.failed,
			r.lateP50.Round(time.Millisecond), r.lateP99.Round(time.Millisecond), r.late.Round(time.Millisecond),
			r.skipped, r.cpu, r.cpuPerProbe.Round(time.Microsecond), r.rssMiB, r.bareRate, r.bareCPU,
			barePerProbe.Round(time.Microsecond), float64(r.cpuPerProbe)/float64(barePerProbe), cpuPerProbeTarget, r.fleetCPU)
	}
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// sampleRSS samples VmRSS every 250ms until ctx ends and sends the peak.
func sampleRSS(ctx context.Context) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, rss("/proc/self/status"))
			select {
			case <-ctx.Done():
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

func rss(statusFile string) int64 {
	b, err := os.ReadFile(statusFile)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
