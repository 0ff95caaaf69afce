// Command bench measures the controller at scale (issue 9): the real
// operator binary against a real kube-apiserver and etcd (pkg/testing/testenv),
// reconciling N External proxies that point at a loopback fleet, so that the
// operator's real health engine takes them from Pending to Ready.
//
//	go run ./pkg/testsuites/bench/operator                  # 1,000 and 10,000 proxies; ~30 min
//	go run ./pkg/testsuites/bench/operator -sizes 200,1000 -steady 30s -steady-large 20s -default-qps-size 200
//
// For each run it reports, beside a reference measured in the same run:
//
//   - the time from the first create to all Ready, beside the time the
//     bench's own client (QPS 1000, 16 goroutines) takes to create the N
//     objects (the API server's write throughput) and the floor the design
//     sets (first probes spread over one interval; two status writes per
//     proxy at --kube-api-qps);
//   - the API writes that took, counted at the API server
//     (apiserver_request_total), per proxy, beside the two status writes an
//     External proxy needs;
//   - the operator's CPU and memory, and the API writes, over a steady window
//     after all are Ready and half the proxies are leased through the lease
//     API, beside the operator with no proxies and kube-apiserver and etcd
//     over the same window;
//   - the same fleet at client-go's default QPS/burst (5/10) beside ours.
//
// Every run has its own namespace and operator process (leader election in
// that namespace); the API server and the fleet are shared. The fleet runs in
// a child process (this binary with -fleet, see pkg/testing/proxytest/fleet). It
// prints markdown on stdout and progress on stderr. It is a measurement, not
// a test: it asserts nothing, but fails naming the phase that did not finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest/fleet"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// The operator's defaults (pkg/operator DefaultOptions) and client-go's.
const (
	ourQPS, ourBurst         = 100, 200
	clientGoQPS, clientGoBur = 5, 10
)

// The bench's own client: fast enough that the API server, not the client,
// bounds the creates.
const (
	createQPS, createBurst = 1000, 2000
	createWorkers          = 16
)

const (
	// leaderTimeout bounds the wait for a fresh operator to lead.
	leaderTimeout = 2 * time.Minute
	// settle lets the last events of a converged fleet reach the API
	// server before the writes are counted.
	settle = 5 * time.Second
)

type config struct {
	sizes               []int
	steadyAt            int // the size whose steady window is steady; the others get steadyLarge
	steady, steadyLarge time.Duration
	defaultQPSSize      int
	timeout             time.Duration
	interval            time.Duration
	delay               time.Duration
	// profileDir, when set, runs every operator with --profiling and saves
	// its heap profile at the end of each steady window there.
	profileDir string
	// workers, when positive, is the operator's --workers (its default is
	// sized for a cluster, not for 50,000 first writes against a slow API
	// server).
	workers int
}

func main() {
	var (
		sizes          = flag.String("sizes", "1000,10000", "fleet sizes, comma-separated; each runs with the operator's default QPS/burst (100/200)")
		steady         = flag.Duration("steady", 5*time.Minute, "steady-state window after all are Ready, at the size -steady-at")
		steadyAt       = flag.Int("steady-at", 0, "the fleet size that gets the -steady window (0: the first of -sizes)")
		steadyLarge    = flag.Duration("steady-large", 60*time.Second, "steady-state window at the other sizes, and of the references without proxies")
		defaultQPSSize = flag.Int("default-qps-size", 1000, "fleet size of the run at client-go's default QPS/burst (5/10)")
		timeout        = flag.Duration("timeout", 20*time.Minute, "limit of each phase that waits for the fleet (all Ready, leases acquired)")
		interval       = flag.Duration("interval", 30*time.Second, "spec.healthCheck.interval of every proxy (the CRD's default)")
		delay          = flag.Duration(fleet.DelayFlag, 0, "how long each fleet proxy waits before answering")
		fleetSize      = flag.Int(fleet.SizeFlag, 0, "internal: serve a fleet of this many proxies and print their addresses")
		workers        = flag.Int("workers", 0, "the operator's --workers (0: its default); the write rate at large sizes is bounded by workers / API write latency")
		profileDir     = flag.String("profile-dir", "", "run each operator with --profiling and save its heap profile (heap-<namespace>.pb.gz, for go tool pprof) at the end of its steady window in this directory")
	)
	klog.InitFlags(nil)
	flag.Parse()
	fleet.ServeIfChild(*fleetSize, *delay)
	ns, err := fleet.ParseSizes(*sizes)
	if err != nil {
		fail(err)
	}
	if *defaultQPSSize < 1 || *interval < time.Second || *steady <= 0 || *steadyLarge <= 0 || *timeout <= 0 {
		fail(errors.New("-default-qps-size must be positive, -interval at least 1s, and -steady, -steady-large and -timeout above zero"))
	}
	if *steadyAt == 0 {
		*steadyAt = ns[0]
	}
	cfg := config{sizes: ns, steadyAt: *steadyAt, steady: *steady, steadyLarge: *steadyLarge, defaultQPSSize: *defaultQPSSize,
		timeout: *timeout, interval: *interval, delay: *delay, profileDir: *profileDir, workers: *workers}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, cfg)
	fmt.Print(report)
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// run sets up the shared parts, runs every measurement and returns the report.
func run(ctx context.Context, cfg config) (string, error) {
	if err := fleet.RaiseFileLimit(); err != nil {
		return "", err
	}
	fleetN := max(slices.Max(cfg.sizes), cfg.defaultQPSSize)
	addrs, stopFleet, err := startFleets(fleetN, cfg.delay)
	if err != nil {
		return "", err
	}
	defer stopFleet()

	dir, err := os.MkdirTemp("", "operator-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	progress("building cmd/proxy-operator")
	if err := benchkit.Build(ctx, dir, "proxy-operator"); err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "proxy-operator")
	progress("starting kube-apiserver and etcd")
	env, kubeconfig, err := benchkit.StartAPIServer(ctx, dir)
	if err != nil {
		return "", err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			progress("stopping testenv: %v", err)
		}
	}()
	benchCfg := rest.CopyConfig(env.Config)
	benchCfg.QPS, benchCfg.Burst = createQPS, createBurst
	crawl, err := versioned.NewForConfig(benchCfg)
	if err != nil {
		return "", err
	}
	b := &bench{cfg: cfg, kube: kubernetes.NewForConfigOrDie(env.Config), crawl: crawl,
		binary: binary, dir: dir, kubeconfig: kubeconfig, addrs: addrs}
	b.apiserverPID, b.etcdPID = env.PIDs()

	var results []result
	progress("reference: the API server alone for %v", cfg.steadyLarge)
	none, err := b.measureSteady(ctx, nil, "", cfg.steadyLarge)
	if err != nil {
		return "", fmt.Errorf("phase \"steady state without an operator\": %w", err)
	}
	results = append(results, result{name: "none", steady: &none})
	runs := []runSpec{{proxies: 0, qps: ourQPS, burst: ourBurst, steady: cfg.steadyLarge}}
	for _, n := range cfg.sizes {
		s := runSpec{proxies: n, qps: ourQPS, burst: ourBurst, steady: cfg.steadyLarge}
		if n == cfg.steadyAt {
			s.steady = cfg.steady
		}
		runs = append(runs, s)
	}
	if !slices.Contains(cfg.sizes, cfg.defaultQPSSize) {
		runs = append(runs, runSpec{proxies: cfg.defaultQPSSize, qps: ourQPS, burst: ourBurst})
	}
	runs = append(runs, runSpec{proxies: cfg.defaultQPSSize, qps: clientGoQPS, burst: clientGoBur})
	// A run that fails ends the bench, but what was measured before it is
	// still reported (how far a size too large for the machine got, and why).
	var failed error
	for _, s := range runs {
		r, err := b.run(ctx, s)
		if err != nil {
			failed = err
			break
		}
		results = append(results, r)
	}
	report := formatReport(cfg, fleetN, results)
	if failed != nil {
		report += fmt.Sprintf("\n**The bench stopped here:** %v\n", failed)
	}
	return report, failed
}

// fleetChunk is the most proxies one fleet child serves: each is a
// listening socket, and this machine caps a process at 20,000 open files
// (RLIMIT_NOFILE's hard limit, which even root may not raise here).
const fleetChunk = 15000

// startFleets serves n proxies from as many fleet children as it takes.
func startFleets(n int, delay time.Duration) ([]string, func(), error) {
	var (
		addrs    []string
		children []*fleet.Process
	)
	stop := func() {
		for _, c := range children {
			c.Stop()
		}
	}
	for len(addrs) < n {
		c, more, err := fleet.Start(min(fleetChunk, n-len(addrs)), delay)
		if err != nil {
			stop()
			return nil, nil, err
		}
		children = append(children, c)
		addrs = append(addrs, more...)
	}
	return addrs, stop, nil
}

// bench holds what the runs share.
type bench struct {
	cfg                   config
	kube                  kubernetes.Interface // admin: namespaces, /metrics
	crawl                 versioned.Interface  // admin at createQPS: creates and the watch
	binary, dir           string
	kubeconfig            string
	addrs                 []string // the fleet's proxies
	apiserverPID, etcdPID int
	seq                   int
}

// runSpec is one run: a fresh namespace and operator, proxies proxies
// created at once, and a steady window after all are Ready (none if 0).
type runSpec struct {
	proxies int
	qps     float32
	burst   int
	steady  time.Duration
}

func (s runSpec) qpsName() string { return fmt.Sprintf("%v/%d", s.qps, s.burst) }

// result is one run's measurements.
type result struct {
	name string // "none" for the API server alone, else the QPS/burst
	spec runSpec
	// Convergence (proxies > 0).
	create, ready time.Duration
	opCPU         float64   // core-seconds from the first create to all Ready
	converge      apiWrites // the bench's creates taken out
	// Steady state (spec.steady > 0).
	leases int
	steady *steadyResult
}

type steadyResult struct {
	window              time.Duration
	operator, api, etcd procWindow
	writes              apiWrites
	operatorPresent     bool
	// health is what the health engine did in the window (nil without an
	// operator).
	health *healthCounts
}

// procWindow is a process's CPU over a window and its memory at the end.
type procWindow struct {
	cores    float64
	rss, hwm int64
}

func (b *bench) run(ctx context.Context, s runSpec) (res result, err error) {
	res = result{name: s.qpsName(), spec: s}
	b.seq++
	ns := fmt.Sprintf("bench-%d-%d", b.seq, s.proxies)
	what := fmt.Sprintf("%d proxies at QPS/burst %s (namespace %s)", s.proxies, s.qpsName(), ns)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
	}()
	progress("%s: starting the operator", what)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating the namespace: %w", err)
	}
	defer b.abandon(ns)
	leaseTTL := max(lease.DefaultMaxTTL, s.steady+5*time.Minute)
	args := []string{
		"--kubeconfig=" + b.kubeconfig,
		"--namespace=" + ns,
		"--leader-elect-namespace=" + ns,
		"--lease-auth=none",
		"--lease-max-ttl=" + leaseTTL.String(),
		fmt.Sprintf("--kube-api-qps=%v", s.qps),
		fmt.Sprintf("--kube-api-burst=%d", s.burst),
	}
	if b.cfg.profileDir != "" {
		args = append(args, "--profiling")
	}
	if b.cfg.workers > 0 {
		args = append(args, fmt.Sprintf("--workers=%d", b.cfg.workers))
	}
	op, err := startOperator(b.binary, filepath.Join(b.dir, ns+".log"), args)
	if err != nil {
		return res, err
	}
	defer op.Kill()
	if err := op.waitLeader(ctx, leaderTimeout); err != nil {
		return res, fmt.Errorf("phase \"operator leads\": %w", err)
	}

	if s.proxies > 0 {
		if err := b.converge(ctx, s, ns, op, &res); err != nil {
			return res, err
		}
		progress("%s: created in %v, all Ready %v after the first create", what, res.create.Round(time.Millisecond), res.ready.Round(time.Millisecond))
	}
	if s.steady == 0 {
		return res, nil
	}
	if s.proxies > 0 {
		res.leases = s.proxies / 2
		if err := acquireLeases(ctx, op.leaseAddr, ns, res.leases, leaseTTL, b.cfg.timeout); err != nil {
			return res, fmt.Errorf("phase \"acquire leases\": %w", errors.Join(err, op.ExitErr()))
		}
	}
	progress("%s: steady state for %v with %d leases held", what, s.steady, res.leases)
	st, err := b.measureSteady(ctx, op, ns, s.steady)
	if err == nil {
		err = op.ExitErr()
	}
	if err != nil {
		return res, fmt.Errorf("phase \"steady state\": %w", err)
	}
	res.steady = &st
	if b.cfg.profileDir != "" {
		path := filepath.Join(b.cfg.profileDir, "heap-"+ns+".pb.gz")
		if err := op.saveHeapProfile(ctx, path); err != nil {
			return res, fmt.Errorf("phase \"heap profile\": %w", err)
		}
		progress("%s: heap profile in %s", what, path)
	}
	return res, nil
}

// converge creates the proxies and waits until all are Ready.
func (b *bench) converge(ctx context.Context, s runSpec, ns string, op *operatorProcess, res *result) error {
	w, err := b.watchReady(ctx, ns, s.proxies)
	if err != nil {
		return fmt.Errorf("phase \"watch proxies\": %w", err)
	}
	defer w.stop()
	before, err := scrapeWrites(ctx, b.kube)
	if err != nil {
		return err
	}
	cpu0, err := readUsage(op.PID())
	if err != nil {
		return err
	}

	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for i := range s.proxies {
		g.Go(func() error {
			_, err := b.crawl.CrawlV1alpha1().Proxies(ns).Create(gctx, newProxy(ns, i, b.addrs[i], b.cfg.interval), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("phase \"create proxies\": %w", err)
	}
	res.create = time.Since(start)

	deadline := time.NewTimer(b.cfg.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-w.allReady:
			break wait
		case <-tick.C:
			progress("  %s after %v", w.summary(), time.Since(start).Round(time.Second))
		case <-op.Exited():
			return fmt.Errorf("phase \"all Ready\": %s: %w", w.summary(), op.ExitErr())
		case <-deadline.C:
			return fmt.Errorf("phase \"all Ready\": not converged after %v: %s\n--- last lines of the operator's log ---\n%s", b.cfg.timeout, w.summary(), op.Tail(20))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	res.ready = w.readyAt.Sub(start)
	cpu1, err := readUsage(op.PID())
	if err != nil {
		return err
	}
	res.opCPU = cpu1.cpuSeconds - cpu0.cpuSeconds
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := scrapeWrites(ctx, b.kube)
	if err != nil {
		return err
	}
	res.converge = after.sub(before)
	res.converge.all["proxies"] -= float64(s.proxies) // the bench's creates
	return nil
}

// measureSteady measures writes and the processes' CPU over window, and
// the health engine's work on the proxies of ns; op nil means no operator.
// The scrapes lie outside the CPU window.
func (b *bench) measureSteady(ctx context.Context, op *operatorProcess, ns string, window time.Duration) (steadyResult, error) {
	st := steadyResult{operatorPresent: op != nil}
	pid := 0
	if op != nil {
		pid = op.PID()
	}
	before, err := scrapeWrites(ctx, b.kube)
	if err != nil {
		return st, err
	}
	var health0 healthCounts
	if op != nil {
		if health0, err = scrapeHealth(ctx, op.metricsURL, b.kube, ns); err != nil {
			return st, err
		}
	}
	read := func() (op, api, etcd usage, err error) {
		if pid != 0 {
			if op, err = readUsage(pid); err != nil {
				return
			}
		}
		if api, err = readUsage(b.apiserverPID); err != nil {
			return
		}
		etcd, err = readUsage(b.etcdPID)
		return
	}
	op0, api0, etcd0, err := read()
	if err != nil {
		return st, err
	}
	start := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return st, ctx.Err()
	}
	op1, api1, etcd1, err := read()
	if err != nil {
		return st, err
	}
	st.window = time.Since(start)
	after, err := scrapeWrites(ctx, b.kube)
	if err != nil {
		return st, err
	}
	st.writes = after.sub(before)
	if op != nil {
		health1, err := scrapeHealth(ctx, op.metricsURL, b.kube, ns)
		if err != nil {
			return st, err
		}
		h := health1.sub(health0)
		st.health = &h
	}
	over := func(u0, u1 usage) procWindow {
		return procWindow{cores: (u1.cpuSeconds - u0.cpuSeconds) / st.window.Seconds(), rss: u1.rss, hwm: u1.hwm}
	}
	st.operator, st.api, st.etcd = over(op0, op1), over(api0, api1), over(etcd0, etcd1)
	return st, nil
}

// abandon deletes a run's proxies (none has a finalizer), so that the next
// run's API server does not carry them, and the namespace, which stays
// Terminating: testenv has no namespace controller.
func (b *bench) abandon(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.crawl.CrawlV1alpha1().Proxies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		progress("deleting the proxies of %s: %v", ns, err)
	}
	if err := b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		progress("deleting namespace %s: %v", ns, err)
	}
}

// newProxy is the i-th External proxy, at the fleet listener addr. Its
// probe URL is never dialled: the fleet's listeners answer 204 themselves.
func newProxy(ns string, i int, addr string, interval time.Duration) *crawlv1alpha1.Proxy {
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("px-%05d", i)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: int32(portNum)},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:            "http://127.0.0.1:9/generate_204",
				ExpectedStatus: http.StatusNoContent,
				Interval:       &metav1.Duration{Duration: interval},
				Timeout:        &metav1.Duration{Duration: min(5*time.Second, interval/2)},
			},
		},
	}
}

// readyWatcher follows the phases of a namespace's proxies through a watch
// (not polling lists, which would load the API server it measures).
type readyWatcher struct {
	want     int
	stopCh   chan struct{}
	factory  crawlinformers.SharedInformerFactory
	allReady chan struct{} // closed when want proxies are Ready
	readyAt  time.Time     // set before allReady closes

	mu     sync.Mutex
	phases map[string]crawlv1alpha1.ProxyPhase
	ready  int
}

func (b *bench) watchReady(ctx context.Context, ns string, want int) (*readyWatcher, error) {
	w := &readyWatcher{want: want, stopCh: make(chan struct{}), allReady: make(chan struct{}),
		phases: map[string]crawlv1alpha1.ProxyPhase{}}
	w.factory = crawlinformers.NewSharedInformerFactoryWithOptions(b.crawl, 0, crawlinformers.WithNamespace(ns))
	informer := w.factory.Crawl().V1alpha1().Proxies().Informer()
	observe := func(obj any) {
		if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
			w.observe(p.Name, p.Status.Phase)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, err
	}
	w.factory.Start(w.stopCh)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		w.stop()
		return nil, errors.New("the proxy informer did not sync")
	}
	return w, nil
}

func (w *readyWatcher) observe(name string, phase crawlv1alpha1.ProxyPhase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phases[name] == crawlv1alpha1.PhaseReady {
		w.ready--
	}
	w.phases[name] = phase
	if phase == crawlv1alpha1.PhaseReady {
		w.ready++
	}
	if w.ready == w.want && w.readyAt.IsZero() {
		w.readyAt = time.Now()
		close(w.allReady)
	}
}

// summary counts the proxies by phase: "812 Ready, 188 Pending of 1000".
func (w *readyWatcher) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := map[string]int{}
	for _, phase := range w.phases {
		counts[string(phase)]++
	}
	var parts []string
	for _, phase := range slices.Sorted(maps.Keys(counts)) {
		name := phase
		if name == "" {
			name = "no phase yet"
		}
		parts = append(parts, fmt.Sprintf("%d %s", counts[phase], name))
	}
	return fmt.Sprintf("%s of %d proxies", strings.Join(parts, ", "), w.want)
}

func (w *readyWatcher) stop() {
	close(w.stopCh)
	w.factory.Shutdown()
}

// acquireLeases takes n leases in namespace ns through the lease API, from
// createWorkers clients at once.
func acquireLeases(ctx context.Context, leaseAddr, ns string, n int, ttl, timeout time.Duration) error {
	c, err := leaseclient.New("http://"+leaseAddr, leaseclient.WithHTTPClient(&http.Client{Timeout: time.Minute}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for i := range n {
		g.Go(func() error {
			_, err := c.Acquire(gctx, leaseclient.AcquireRequest{Holder: fmt.Sprintf("bench-%d", i), Namespace: ns, TTL: ttl, Wait: 10 * time.Second})
			return err
		})
	}
	return g.Wait()
}

// formatReport renders the results as markdown.
func formatReport(cfg config, fleetN int, results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	p("Controller benchmark: %s, %d CPUs (the operator runs with GOMAXPROCS = CPUs, built without -race); "+
		"External proxies probed every %v at a loopback fleet of %d listeners (answer delay %v); "+
		"the bench creates with QPS %d/burst %d from %d goroutines.\n\n",
		runtime.Version(), runtime.NumCPU(), cfg.interval, fleetN, cfg.delay, createQPS, createBurst, createWorkers)
	if cfg.workers > 0 {
		p("The operator runs with --workers=%d.\n\n", cfg.workers)
	}

	p("### Convergence: N External proxies created at once\n\n")
	p("| operator QPS/burst | proxies | bench creates all (s) | bench creates/s | first create → all Ready (s) | floor (s) | target: 1.1 × (floor + creates) (s) | operator CPU (core-s) | status writes/proxy | other Proxy writes/proxy | events/proxy | other writes (total) | rejected writes (total) |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range results {
		if r.spec.proxies == 0 {
			continue
		}
		n := float64(r.spec.proxies)
		w := r.converge.all
		floor := floorSeconds(r.spec, cfg.interval)
		p("| %s | %d | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %s | %s |\n",
			r.name, r.spec.proxies, r.create.Seconds(), n/r.create.Seconds(), r.ready.Seconds(),
			floor, convergenceSlack*(floor+r.create.Seconds()), r.opCPU,
			w["proxies/status"]/n, w["proxies"]/n, w["events"]/n,
			w.others(1, "%.0f", "proxies/status", "proxies", "events"), r.converge.rejected.others(1, "%.0f"))
	}

	p("\n### Steady state: all Ready, half of them leased\n\n")
	p("| operator | proxies | leases held | window (s) | operator CPU (cores) | operator RSS (MiB) | operator peak RSS (MiB) | kube-apiserver CPU (cores) | kube-apiserver RSS (MiB) | etcd CPU (cores) | etcd RSS (MiB) | Proxy writes/min (+status) | Proxy writes per proxy per hour (target ≤ 1) | events/min | other writes/min | rejected writes/min |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range results {
		st := r.steady
		if st == nil {
			continue
		}
		name, op := "idle (no proxies)", fmt.Sprintf("%.3f | %.0f | %.0f", st.operator.cores, mib(st.operator.rss), mib(st.operator.hwm))
		switch {
		case !st.operatorPresent:
			name, op = "none: API server alone", "– | – | –"
		case r.spec.proxies > 0:
			name = "QPS/burst " + r.name
		}
		minutes, w := st.window.Minutes(), st.writes.all
		perProxyHour := "–"
		if r.spec.proxies > 0 {
			perProxyHour = fmt.Sprintf("%.2f", (w["proxies"]+w["proxies/status"])/minutes*60/float64(r.spec.proxies))
		}
		p("| %s | %d | %d | %.0f | %s | %.3f | %.0f | %.3f | %.0f | %.1f | %s | %.1f | %s | %s |\n",
			name, r.spec.proxies, r.leases, st.window.Seconds(), op,
			st.api.cores, mib(st.api.rss), st.etcd.cores, mib(st.etcd.rss),
			(w["proxies"]+w["proxies/status"])/minutes, perProxyHour, w["events"]/minutes,
			w.others(minutes, "%.1f", "proxies", "proxies/status", "events"), st.writes.rejected.others(minutes, "%.1f"))
	}

	sb.WriteString(formatCostGrowth(cfg, results))

	p("\n### Health probes in the steady window\n\n")
	p("| operator | proxies | probes/min | failed probes/min, by result | probes started > %.2f s late | dispatches skipped/min | verdicts reported/min, by reason | Healthy events/min | Unhealthy events/min | most frequent Unhealthy messages (per min) |\n", lateProbe)
	p("|---|---:|---:|---|---:|---:|---|---:|---:|---|\n")
	for _, r := range results {
		st := r.steady
		if st == nil || st.health == nil || r.spec.proxies == 0 {
			continue
		}
		h, minutes := st.health, st.window.Minutes()
		total := 0.0
		for _, n := range h.probes {
			total += n
		}
		late := "0"
		if h.scheduled > 0 {
			late = fmt.Sprintf("%.0f (%.2f%%)", h.late, 100*h.late/h.scheduled)
		}
		p("| QPS/burst %s | %d | %.0f | %s | %s | %.1f | %s | %.1f | %.1f | %s |\n",
			r.name, r.spec.proxies, total/minutes, h.probes.others(minutes, "%.1f", health.ResultSuccess), late, h.skipped/minutes,
			h.reports.others(minutes, "%.1f"),
			h.events[controller.ReasonHealthy]/minutes, h.events[controller.ReasonUnhealthy]/minutes, topMessages(h.unhealthyMessages, 3, minutes))
	}

	p("\n#### How to read this\n\n")
	p("- **Convergence.** The time from the first create to the moment the bench's watch saw the last proxy Ready, " +
		"beside the time the bench's own client took to create the N objects on the same API server in the same run " +
		"(the operator works while they are created). The floor is issue 16's: first probes spread over one interval, " +
		"and two status writes per proxy under the operator's --kube-api-qps/--kube-api-burst, " +
		"so floor = max(interval, (2N − burst) / QPS); the target is 1.1 × (floor + the bench's creation time). " +
		"Since docs/decisions/0121-proxy-created-while-engine-runs-probed.md only the fleet a new leader meets at once is spread over the interval; a proxy created while the engine runs " +
		"is probed at the next tick, so below the write bound expect about the creation time plus a few seconds.\n")
	p("- **Writes** are counted at the API server (apiserver_request_total, verbs POST/PUT/PATCH/DELETE/APPLY, any response code; "+
		"the rejected column lists those that were not 2xx, such as conflicts), "+
		"before and after each phase, with the bench's N creates taken out. An External proxy needs two status writes "+
		"(pkg/controller/external.go, status.go: the endpoint recorded, phase Pending; then the first verdict, phase Ready; "+
		"TestWritesPerProxy asserts at most 2) and one Healthy event (events have their own client and rate limit). "+
		"Leases are the operator's leader election (a renewal every 2 s) plus kube-apiserver's own lease; "+
		"configmaps are the lease API's horizon. Convergence counts include the %v the bench waits after all Ready for the last events.\n", settle)
	p("- **Steady state** starts once all proxies are Ready and half of them are leased (TTL above the window, so the lease store stays full); " +
		"CPU is utime+stime over the window divided by its length (1.0 = one core busy); RSS is VmRSS at its end, " +
		"peak RSS is VmHWM since the operator started (so it includes convergence). A healthy steady fleet should need no Proxy writes at all. " +
		"The rows without proxies are the references: the API server alone, and the operator leading an empty namespace. " +
		"testenv runs etcd with --unsafe-no-fsync, so its figures (and the API server's write latency) are kinder than a real cluster's.\n")
	p("- **Cost growth** is each size's steady row above the idle operator's: (RSS − idle RSS) / N, and (CPU − idle CPU) × 3600 / N " +
		"in core-seconds per proxy per hour, each beside the same figure at 10,000 (issue 16: within 1.2× at 50,000). " +
		"The fleet is served by children of at most 15,000 listeners each (this machine caps a process at 20,000 open files).\n")
	p("- **Health probes** are the operator's own counters (proxy_operator_probe_duration_seconds by result, " +
		"proxy_operator_probe_schedule_delay_seconds, proxy_operator_probe_dispatch_skipped_total) and the namespace's events by reason, " +
		"before and after the steady window. Every proxy of the fleet answers 204 from a loopback listener in the bench's child process, " +
		"so a failed probe is the machine not keeping up (the fleet, the operator and the API server share its cores), not a broken proxy; " +
		"a late start says the probe pool is behind, a timeout with on-time starts says the answer was slow.\n")
	p("- **QPS.** The %v/%d row is the same fleet with client-go's default QPS/burst, beside our defaults (%d/%d) at the same size; "+
		"every run has its own namespace and operator process, and the API server is shared.\n", clientGoQPS, clientGoBur, ourQPS, ourBurst)
	return sb.String()
}

// convergenceSlack is issue 16's allowance on convergence: all Ready within
// the floor plus the bench's own creation time, plus 10%.
const convergenceSlack = 1.1

// costGrowthLimit is issue 16's bound on per-proxy cost growth: at the
// largest size within 1.2× of that at 10,000.
const costGrowthLimit = 1.2

// formatCostGrowth renders the per-proxy cost of each size with a steady
// window, above the idle operator: RSS bytes and CPU per proxy, and
// convergence beside its floor; each size's cost beside that of 10,000
// (or the first size, without a 10,000 run).
func formatCostGrowth(cfg config, results []result) string {
	var idle *steadyResult
	var rows []result
	for _, r := range results {
		switch {
		case r.steady == nil || !r.steady.operatorPresent:
		case r.spec.proxies == 0:
			idle = r.steady
		case r.spec.qps == ourQPS:
			rows = append(rows, r)
		}
	}
	if idle == nil || len(rows) == 0 {
		return ""
	}
	type cost struct{ rss, cpu float64 }
	costOf := func(r result) cost {
		n := float64(r.spec.proxies)
		return cost{
			rss: float64(r.steady.operator.rss-idle.operator.rss) / n,
			cpu: (r.steady.operator.cores - idle.operator.cores) * 3600 / n,
		}
	}
	ref := rows[0]
	for _, r := range rows {
		if r.spec.proxies == 10000 {
			ref = r
		}
	}
	refCost := costOf(ref)
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("\n### Cost growth: per proxy, above the idle operator, in steady state\n\n")
	p("| proxies | operator RSS (MiB) | RSS per proxy (bytes) | × at %d (target ≤ %.1f×) | operator CPU (cores) | CPU per proxy (core-s per hour) | × at %d (target ≤ %.1f×) | first create → all Ready (s) | floor (s) | steady window (s) |\n",
		ref.spec.proxies, costGrowthLimit, ref.spec.proxies, costGrowthLimit)
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		c := costOf(r)
		p("| %d | %.0f | %.0f | %.2f× | %.3f | %.2f | %.2f× | %.1f | %.1f | %.0f |\n",
			r.spec.proxies, float64(r.steady.operator.rss)/(1<<20), c.rss, c.rss/refCost.rss,
			r.steady.operator.cores, c.cpu, c.cpu/refCost.cpu,
			r.ready.Seconds(), floorSeconds(r.spec, cfg.interval), r.steady.window.Seconds())
	}
	return sb.String()
}

// floorSeconds is the least time to all Ready the design allows: first
// probes spread over one interval, and two status writes per proxy through
// a token bucket of qps and burst.
func floorSeconds(s runSpec, interval time.Duration) float64 {
	writes := max(0, float64(2*s.proxies-s.burst)) / float64(s.qps)
	return max(interval.Seconds(), writes)
}
