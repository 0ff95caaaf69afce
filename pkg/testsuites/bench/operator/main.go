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
//   - the same fleet at client-go's default QPS/burst (5/10) beside ours;
//   - at the -steady-at size, the operator's CPU and memory with 20 open
//     dashboard streams (issue 55) beside a window with none.
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
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
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
	// dashboards is how many dashboard streams the operator at steadyAt
	// serves in its dashboard window (0: no dashboard measurement).
	dashboards int
	// instances, when positive, adds a sessions run beside each size: N
	// members of a pool on this many shared instances (sessions.go).
	instances int
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
		dashboards     = flag.Int("dashboards", 20, "open dashboard streams in the window after the steady one at -steady-at, beside a window with none (0: skip)")
		instances      = flag.Int("instances", 0, "beside each size's N single-exit proxies, run N pool members that are sessions on this many shared instances (spec.membersPerInstance; 0: skip)")
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
		timeout: *timeout, interval: *interval, delay: *delay, profileDir: *profileDir, workers: *workers, dashboards: *dashboards, instances: *instances}

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
		if cfg.instances > 0 {
			s.sessions = true
			runs = append(runs, s)
		}
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
	// sessions: the proxies are pool members on shared instances (sessions.go).
	sessions bool
}

func (s runSpec) qpsName() string {
	if s.sessions {
		return fmt.Sprintf("%v/%d, sessions", s.qps, s.burst)
	}
	return fmt.Sprintf("%v/%d", s.qps, s.burst)
}

// result is one run's measurements.
type result struct {
	name string // "none" for the API server alone, else the QPS/burst
	spec runSpec
	// Convergence (proxies > 0).
	create, ready time.Duration
	opCPU         float64   // core-seconds from the first create to all Ready
	converge      apiWrites // the bench's creates taken out
	// Steady state (spec.steady > 0).
	leases  int
	acquire time.Duration // acquiring the leases, from the first to the last
	steady  *steadyResult
	// dashboards: the operator without and with open dashboards, at
	// steadyAt (nil elsewhere).
	dashboards *dashboardResult
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
	leaseTTL := max(store.DefaultMaxTTL, s.steady+5*time.Minute)
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
	if s.sessions {
		args = append(args, "--providers=session")
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
		start := time.Now()
		if err := acquireLeases(ctx, op.leaseAddr, ns, res.leases, leaseTTL, b.cfg.timeout); err != nil {
			return res, fmt.Errorf("phase \"acquire leases\": %w", errors.Join(err, op.ExitErr()))
		}
		res.acquire = time.Since(start)
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
	if s.proxies == b.cfg.steadyAt && b.cfg.dashboards > 0 {
		progress("%s: %v without a dashboard, then %v with %d open", what, b.cfg.steadyLarge, b.cfg.steadyLarge, b.cfg.dashboards)
		d, err := b.measureDashboards(ctx, op, b.cfg.dashboards, b.cfg.steadyLarge)
		if err != nil {
			return res, fmt.Errorf("phase \"dashboards\": %w", errors.Join(err, op.ExitErr()))
		}
		res.dashboards = &d
	}
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
	want := s.proxies
	if s.sessions {
		want += b.cfg.instances // the instances become Ready too
	}
	w, err := b.watchReady(ctx, ns, want)
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
	if s.sessions {
		if err := b.createSessionsPool(ctx, ns, s.proxies, b.addrs[0]); err != nil {
			return fmt.Errorf("phase \"create pool\": %w", err)
		}
	} else {
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
	if !s.sessions {
		res.converge.all["proxies"] -= float64(s.proxies) // the bench's creates
	}
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
	// A pool first, or it would make its members again.
	if err := b.crawl.CrawlV1alpha1().ProxyPools(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		progress("deleting the pools of %s: %v", ns, err)
	}
	b.dropFinalizers(ctx, ns)
	if err := b.crawl.CrawlV1alpha1().Proxies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		progress("deleting the proxies of %s: %v", ns, err)
	}
	if err := b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		progress("deleting namespace %s: %v", ns, err)
	}
}
