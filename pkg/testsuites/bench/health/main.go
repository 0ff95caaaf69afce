// Command bench measures the health engine against a fleet of loopback
// proxies: how many probes per second it achieves against its schedule
// (N proxies / interval), how late probes start after their due time, and
// what that costs in CPU and memory, beside a bare loop that runs the same
// probe function at the same concurrency as fast as it can (the limit, and
// issue 16's reference), and beside the same loop paced to the engine's
// rate (the same load without the engine). They alternate, three rounds
// per size by default, so that all sample the same stretch of a shared
// machine; each round starts a fresh engine.
//
//	go run ./pkg/testsuites/bench/health                    # 1,000 proxies: 3 × (20s engine, 10s bare, 10s paced); 10,000: 3 × (30s, 10s, 10s)
//	go run ./pkg/testsuites/bench/health -sizes 2000 -durations 10s -delay 100ms
//	go run ./pkg/testsuites/bench/health -sizes 10000 -durations 60s -bare 60s -rounds 1 -cpuprofile e.prof   # and e.prof.paced
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
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
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
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest/fleet"
)

func main() {
	var (
		sizes     = flag.String("sizes", "1000,10000", "fleet sizes, comma-separated")
		durations = flag.String("durations", "20s,30s", "how long the engine runs in each round, for each size, comma-separated")
		interval  = flag.Duration("interval", 10*time.Second, "spec.healthCheck.interval of every proxy")
		timeout   = flag.Duration("timeout", 5*time.Second, "spec.healthCheck.timeout of every proxy")
		workers   = flag.Int("workers", 0, "engine workers (0: health.DefaultWorkers)")
		tick      = flag.Duration("tick", 0, "scheduler tick (0: health.DefaultTick)")
		bare      = flag.Duration("bare", 10*time.Second, "how long the bare loop runs in each round, and then the paced loop")
		rounds    = flag.Int("rounds", 3, "alternating rounds per size (each: the engine for its duration, then the bare loop)")
		delay     = flag.Duration(fleet.DelayFlag, 0, "how long each fleet proxy waits before answering")
		fleetSize = flag.Int(fleet.SizeFlag, 0, "internal: serve a fleet of this many proxies and print their addresses")
		profile   = flag.String("cpuprofile", "", "if set, write a CPU profile of the engine's last run at the last size to this file, and one of the paced loop's beside it (FILE.paced)")
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
	if *rounds < 1 {
		fail(errors.New("-rounds must be at least 1"))
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

	fmt.Printf("health engine benchmark: %s, GOMAXPROCS %d, %d CPUs; interval %v, timeout %v, tick %v, %d workers, fleet delay %v; %d alternating rounds per size (the engine, then the bare loop and the paced loop for %v each), figures summed over them\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), *interval, *timeout, *tick, *workers, *delay, *rounds, *bare)
	cfg := settings{rounds: *rounds, bare: *bare, interval: *interval, timeout: *timeout, tick: *tick, delay: *delay, workers: *workers}
	var rows []row
	for i, n := range ns {
		prof := ""
		if i == len(ns)-1 {
			prof = *profile
		}
		r, err := measure(n, ds[i], cfg, prof)
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

// settings are what every size is measured with.
type settings struct {
	rounds                               int
	bare, interval, timeout, tick, delay time.Duration
	workers                              int
}

// row is one fleet size's measurements, summed over its rounds.
type row struct {
	proxies                int
	interval               time.Duration
	workers                int
	rounds                 int
	run                    time.Duration // of the engine, each round
	expected, achieved     float64       // probes/s
	failed                 int
	lateP50, lateP99, late time.Duration
	skipped                int
	cpu                    float64 // cores
	cpuPerProbe            time.Duration
	rssMiB                 float64
	bareRate, bareCPU      float64
	barePerProbe           time.Duration
	pacedPerProbe          time.Duration // the bare loop at the engine's rate
	fleetCPU               float64       // cores, during the engine's runs
	roundRatios            []float64     // engine ÷ bare CPU per probe, each round
	engineAlloc, bareAlloc float64       // bytes allocated per probe
}

// engineRun is one run of the engine; bareRun one of the bare loop.
type engineRun struct {
	window          time.Duration // the steady window: from one interval after the start to the end
	cpu, fleetCPU   float64       // seconds, in the window
	probes          int           // probes started in the window and finished by its end
	failed, skipped int
	delays          []time.Duration
	peakRSS         int64
	allocated       uint64 // bytes, by the whole process
}

type bareRun struct {
	elapsed   time.Duration
	probes    int64
	cpu       float64 // seconds
	allocated uint64  // bytes; the bare loop's only (the paced loop's is not reported)
}

func (e engineRun) cpuPerProbe() time.Duration {
	return time.Duration(e.cpu / float64(e.probes) * float64(time.Second))
}

func (b bareRun) cpuPerProbe() time.Duration {
	return time.Duration(b.cpu / float64(b.probes) * float64(time.Second))
}

// measure alternates runs of the engine and of the bare loops, so that all
// sample the same stretch of a shared machine: a single pair of runs moved
// the ratio from 0.92x to 1.54x here (docs/decisions/0157-scheduling-pass-looks-again-only-at.md).
func measure(n int, run time.Duration, cfg settings, profile string) (row, error) {
	r := row{proxies: n, interval: cfg.interval, workers: cfg.workers, rounds: cfg.rounds, run: run,
		expected: float64(n) / cfg.interval.Seconds()}
	fl, addrs, err := fleet.Start(n, cfg.delay)
	if err != nil {
		return r, err
	}
	defer fl.Stop()

	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	targets := make([]health.Target, len(addrs))
	for i, addr := range addrs {
		p := benchProxy(i, addr, cfg.interval, cfg.timeout)
		if err := store.Add(p); err != nil {
			return r, err
		}
		targets[i] = health.Target{Proxy: &url.URL{Scheme: "http", Host: addr}, URL: p.Spec.HealthCheck.URL,
			ExpectedStatus: 204, Timeout: cfg.timeout}
	}

	var (
		window          time.Duration
		cpu, fleetCPU   float64
		probes          int
		delays          []time.Duration
		bare, paced     bareRun
		engineAllocated uint64
	)
	for round := range cfg.rounds {
		prof := ""
		if round == cfg.rounds-1 {
			prof = profile
		}
		e, err := runEngine(store, fl, run, cfg, prof)
		if err != nil {
			return r, err
		}
		b := runBare(targets, cfg)
		// The paced loop: the same load as the engine's, without the engine.
		stopPaced, err := startCPUProfile(pacedProfile(prof))
		if err != nil {
			return r, err
		}
		pc := runPaced(targets, r.expected, cfg)
		if err := stopPaced(); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "bench: %d proxies, round %d: CPU per probe: engine %v, bare loop %v, paced loop %v\n",
			n, round+1, e.cpuPerProbe().Round(time.Microsecond), b.cpuPerProbe().Round(time.Microsecond), pc.cpuPerProbe().Round(time.Microsecond))
		r.roundRatios = append(r.roundRatios, float64(e.cpuPerProbe())/float64(b.cpuPerProbe()))
		window += e.window
		cpu, fleetCPU = cpu+e.cpu, fleetCPU+e.fleetCPU
		probes += e.probes
		r.failed, r.skipped = r.failed+e.failed, r.skipped+e.skipped
		delays = append(delays, e.delays...)
		r.rssMiB = max(r.rssMiB, float64(e.peakRSS)/(1<<20))
		bare.elapsed, bare.probes, bare.cpu = bare.elapsed+b.elapsed, bare.probes+b.probes, bare.cpu+b.cpu
		bare.allocated += b.allocated
		engineAllocated += e.allocated
		paced.probes, paced.cpu = paced.probes+pc.probes, paced.cpu+pc.cpu
	}
	r.cpu = cpu / window.Seconds()
	r.fleetCPU = fleetCPU / window.Seconds()
	r.achieved = float64(probes) / window.Seconds()
	r.cpuPerProbe = engineRun{cpu: cpu, probes: probes}.cpuPerProbe()
	r.lateP50, r.lateP99, r.late = quantiles(delays)
	r.bareRate = float64(bare.probes) / bare.elapsed.Seconds()
	r.bareCPU = bare.cpu / bare.elapsed.Seconds()
	r.barePerProbe = bare.cpuPerProbe()
	r.pacedPerProbe = paced.cpuPerProbe()
	r.engineAlloc = float64(engineAllocated) / float64(probes)
	r.bareAlloc = float64(bare.allocated) / float64(bare.probes)
	return r, nil
}

// runEngine runs a fresh engine over the fleet in store for run.
func runEngine(store cache.Indexer, fl *fleet.Process, run time.Duration, cfg settings, profile string) (engineRun, error) {
	// Probes are counted over a steady window: after one interval every
	// proxy has had its (jittered) first probe and keeps its cadence.
	warmup := cfg.interval
	if warmup >= run {
		warmup = 0
	}
	m := &benchMetrics{}
	engine, err := health.New(health.Config{
		Proxies: store,
		Enqueue: func(cache.ObjectName) {},
		Workers: cfg.workers,
		Tick:    cfg.tick,
		Metrics: m,
		Logger:  klog.Background().V(1), // quiet
	})
	if err != nil {
		return engineRun{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rss := sampleRSS(ctx)
	start := time.Now()
	done := make(chan error, 1)
	m.windowStart = start.Add(warmup)
	go func() { done <- engine.Run(ctx) }()
	// CPU, garbage and the profile are the steady window's, like the
	// probes they are divided by: the first pass meeting the whole fleet
	// and its first verdicts happen once per engine, not per probe, and
	// the loops have no start to pay for (docs/decisions/0169-health-bench-divides-engine-steady-window.md).
	time.Sleep(time.Until(m.windowStart))
	cpu0, fleet0, alloc0 := cpuSeconds(), fl.CPUSeconds(), allocatedBytes()
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return engineRun{}, err
	}
	time.Sleep(time.Until(start.Add(run)))
	m.freeze()
	if err := stopProfile(); err != nil {
		return engineRun{}, err
	}
	e := engineRun{window: time.Since(m.windowStart)}
	cpu1, fleet1 := cpuSeconds(), fl.CPUSeconds()
	e.allocated = allocatedBytes() - alloc0
	cancel()
	if err := <-done; err != nil {
		return e, err
	}
	e.peakRSS = <-rss
	e.cpu, e.fleetCPU = cpu1-cpu0, fleet1-fleet0
	m.mu.Lock()
	e.probes, e.failed, e.skipped, e.delays = m.probes, m.failed, m.skipped, m.delays
	m.mu.Unlock()
	return e, nil
}

// runPaced is the bare loop held to the engine's schedule: every tick it
// hands rate × tick probes, round robin over the targets, to the same
// number of workers through a queue, as the engine's dispatch does; there
// is no state, no verdict, no cache. It is the same load as the engine's.
func runPaced(targets []health.Target, rate float64, cfg settings) bareRun {
	var count atomic.Int64
	ctx, cancel := loopContext(cfg.bare)
	defer cancel()
	jobs := make(chan health.Target, 4*cfg.workers)
	var wg sync.WaitGroup
	cpu0 := cpuSeconds()
	start := time.Now()
	for range cfg.workers {
		wg.Go(func() {
			for t := range jobs {
				if res := health.Probe(ctx, t); res.OK {
					count.Add(1)
				}
			}
		})
	}
	perTick := int(rate * cfg.tick.Seconds())
	ticker := time.NewTicker(cfg.tick)
	next := 0
	for done := false; !done; {
		for range perTick {
			select {
			case jobs <- targets[next%len(targets)]:
				next++
			default: // a full queue: the engine would skip too
			}
		}
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	return bareRun{elapsed: time.Since(start), probes: count.Load(), cpu: cpuSeconds() - cpu0}
}

// runBare is the bare loop: the same probe, the same concurrency, no
// schedule, as fast as it goes, for cfg.bare.
func runBare(targets []health.Target, cfg settings) bareRun {
	var count, next atomic.Int64
	ctx, cancel := loopContext(cfg.bare)
	defer cancel()
	var wg sync.WaitGroup
	cpu0, alloc0 := cpuSeconds(), allocatedBytes()
	start := time.Now()
	for range cfg.workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				t := targets[int(next.Add(1))%len(targets)]
				if res := health.Probe(ctx, t); res.OK {
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return bareRun{elapsed: time.Since(start), probes: count.Load(), cpu: cpuSeconds() - cpu0, allocated: allocatedBytes() - alloc0}
}

// loopContext is a loop's context, canceled after d. It is ended by a
// cancel, not a deadline, like the engine's: under a parent deadline
// nearer than the probe's timeout, a probe's context takes no timer of its
// own, a saving the engine never gets (docs/decisions/0164-engine-own-work-probe-measured-alone.md).
func loopContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(d, cancel)
	return ctx, func() {
		stop.Stop()
		cancel()
	}
}

// startCPUProfile profiles this process into path until the returned
// function is called; with no path it does nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
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

// benchMetrics counts the probes started in the window and keeps every
// schedule delay until frozen.
type benchMetrics struct {
	health.NoMetrics
	windowStart    time.Time
	mu             sync.Mutex
	frozen         bool
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

// quantiles are the median, 99th percentile and maximum of ds.
func quantiles(ds []time.Duration) (p50, p99, maximum time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	d := slices.Clone(ds)
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.50), at(0.99), d[len(d)-1]
}

// cpuPerProbeTarget is issue 16's bound on the engine's CPU per probe, as
// a multiple of the bare loop's.
const cpuPerProbeTarget = 1.1

func printTable(rows []row) {
	fmt.Println("| proxies | interval | workers | run | expected probes/s | engine probes/s | achieved | failed | lateness p50 | p99 | max | skipped dispatches | engine CPU (cores) | CPU per probe | engine RSS (MiB) | bare loop probes/s | bare loop CPU (cores) | bare loop CPU per probe | engine ÷ bare, CPU per probe | each round | target | paced loop CPU per probe | engine ÷ paced | fleet CPU (cores) | engine allocated per probe | bare loop allocated per probe |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		each := make([]string, len(r.roundRatios))
		for i, x := range r.roundRatios {
			each[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Printf("| %d | %v | %d | %d × %v | %.1f | %.1f | %.1f%% | %d | %v | %v | %v | %d | %.3f | %v | %.0f | %.0f | %.2f | %v | %.2f× | %s | ≤ %.1f× | %v | %.2f× | %.2f | %.0f B | %.0f B |\n",
			r.proxies, r.interval, r.workers, r.rounds, r.run, r.expected, r.achieved, 100*r.achieved/r.expected, r.failed,
			r.lateP50.Round(time.Millisecond), r.lateP99.Round(time.Millisecond), r.late.Round(time.Millisecond),
			r.skipped, r.cpu, r.cpuPerProbe.Round(time.Microsecond), r.rssMiB, r.bareRate, r.bareCPU,
			r.barePerProbe.Round(time.Microsecond), float64(r.cpuPerProbe)/float64(r.barePerProbe), strings.Join(each, ", "),
			cpuPerProbeTarget, r.pacedPerProbe.Round(time.Microsecond), float64(r.cpuPerProbe)/float64(r.pacedPerProbe), r.fleetCPU,
			r.engineAlloc, r.bareAlloc)
	}
}

// allocatedBytes is what this process has allocated on the heap so far:
// a probe's garbage is GC work, in the engine's process as in the loops'
// (docs/decisions/0167-probe-leaves-third-less-garbage-scheduling.md).
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
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

// sampleRSS samples the resident set every 250ms until ctx ends and sends
// the peak. It reads /proc/self/statm, not /proc/self/status: a read of
// status took ~0.5ms of this process's CPU here, 1.7% of the engine's
// measured CPU at 10,000 proxies, which the bare loops never paid
// (docs/decisions/0164-engine-own-work-probe-measured-alone.md).
func sampleRSS(ctx context.Context) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, residentBytes())
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

// residentBytes is this process's resident set from /proc/self/statm (its
// second field, in pages), 0 if it cannot be read.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
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

// pacedProfile is where the paced loop's profile goes beside the engine's
// at path: the two side by side show what is the engine's own (decision
// 164).
func pacedProfile(path string) string {
	if path == "" {
		return ""
	}
	return path + ".paced"
}
