// Command leaseapi measures the lease API on the operator binary (issue 16):
// cmd/proxy-operator, built without -race, against a real kube-apiserver and
// etcd (pkg/testing/testenv) with --lease-auth=none, leading a namespace of
// N External proxies (a loopback fleet in a child process, probed by the
// operator's health engine until all are Ready). C clients, one
// pkg/lease/client each goroutine shares, do acquire+release pairs against
// it, beside the same client against a trivial net/http handler in a
// process of its own (this binary with -serve-trivial, in the lease API's
// own net/http server settings unless -bare-trivial) that answers the
// operator's own grant body, byte for byte, and 204 to the release: the
// same requests, the same responses, nothing behind them.
//
//	go run ./pkg/testsuites/bench/leaseapi                       # 1,000 proxies, 64 clients, 11 rounds of 5 s
//	go run ./pkg/testsuites/bench/leaseapi -cpuprofile op.pprof  # also a CPU profile of the operator under load
//	go run ./pkg/testsuites/bench/leaseapi -baseline-ref main    # A/B: main's operator in the same rounds
//	go run ./pkg/testsuites/bench/leaseapi -quick                # all of it small, in about two minutes
//
// The same rounds run three replicas with --lease-replication=raft beside
// the one process (raft.go; -raft-replicas 0 leaves them out), and then
// read each replica's memory at 10,000 proxies and 100,000 cool-downs.
//
// Rounds alternate which side goes first; the report gives every round and
// the medians. It prints markdown on stdout and progress on stderr. It is a
// measurement, not a test: it asserts nothing, but fails naming the phase
// that did not finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest/fleet"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// Issue 16's targets.
const (
	targetPairsRatio = 0.95
	targetP99Ratio   = 1.2
)

func main() {
	var (
		proxies    = flag.Int("proxies", 1000, "External proxies the operator leases out (MaxLeases 1 each)")
		clients    = flag.Int("clients", 64, "concurrent clients")
		rounds     = flag.Int("rounds", 11, "alternating rounds (each: the trivial handler and the operator, one after the other)")
		round      = flag.Duration("round", 5*time.Second, "length of one measurement")
		cpuProfile = flag.String("cpuprofile", "", "if set, write a CPU profile of the operator (its /debug/pprof/profile) taken during one more lease round")
		timeout    = flag.Duration("timeout", 10*time.Minute, "limit of the phase that waits for all proxies Ready")
		serve      = flag.String("serve-trivial", "", "internal: serve the trivial handler, answering acquires with the body in this file, and print its address")
		fleetSize  = flag.Int(fleet.SizeFlag, 0, "internal: serve a fleet of this many proxies and print their addresses")
		fleetDelay = flag.Duration(fleet.DelayFlag, 0, "internal: how long each fleet proxy waits before answering")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *quick {
		quickDefaults(map[string]string{"proxies": "200", "clients": "32", "rounds": "3", "round": "2s",
			"memory-proxies": "1000", "memory-cooldowns": "10000"})
	}
	fleet.ServeIfChild(*fleetSize, *fleetDelay)
	if *serve != "" {
		if err := serveTrivial(*serve); err != nil {
			fail(err)
		}
		return
	}
	if *proxies < *clients || *clients < 1 || *rounds < 1 || *round <= 0 {
		fail(errors.New("-clients must be positive and at most -proxies, -rounds and -round positive"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, config{proxies: *proxies, clients: *clients, rounds: *rounds, round: *round, cpuProfile: *cpuProfile, timeout: *timeout,
		raftReplicas: *raftReplicas, raftProfile: *raftProfile, memoryProxies: *memoryProxies, memoryCooldowns: *memoryCooldowns})
	if err != nil {
		fail(err)
	}
	fmt.Print(report)
}

type config struct {
	proxies, clients, rounds int
	round, timeout           time.Duration
	cpuProfile               string
	// The raft side (raft.go): its replicas (0: none), its profile, and
	// the load its memory is read at.
	raftReplicas                   int
	raftProfile                    string
	memoryProxies, memoryCooldowns int
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "leaseapi bench:", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "leaseapi bench: "+format+"\n", args...)
}

func run(ctx context.Context, cfg config) (string, error) {
	if err := fleet.RaiseFileLimit(); err != nil {
		return "", err
	}
	fleetSize := cfg.proxies
	if cfg.raftReplicas > 0 {
		fleetSize = max(fleetSize, cfg.memoryProxies)
	}
	fl, addrs, err := fleet.Start(fleetSize, 0)
	if err != nil {
		return "", err
	}
	defer fl.Stop()
	dir, err := os.MkdirTemp("", "leaseapi-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	binary, baselines, err := buildOperators(ctx, dir)
	if err != nil {
		return "", err
	}
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
	crawl, kube, err := benchClients(env.Config)
	if err != nil {
		return "", err
	}
	const ns = "lease-bench"

	op, c, err := startOperator(ctx, dir, binary, kubeconfig, crawl, kube, ns, addrs, cfg)
	if err != nil {
		return "", err
	}
	defer op.Kill()
	leaseURL := "http://" + op.Addr(1)
	trivial, tc, err := startTrivial(ctx, dir, leaseURL, ns, cfg.clients)
	if err != nil {
		return "", err
	}
	defer trivial.Kill()

	sides := []side{
		{name: "trivial net/http handler", clients: []*leaseclient.Client{tc}, procs: []*benchkit.Process{trivial}, ns: ns},
		{name: "lease API on the operator", clients: []*leaseclient.Client{c}, procs: []*benchkit.Process{op}, ns: ns},
	}
	baseSides, err := startBaselines(ctx, dir, kubeconfig, crawl, kube, addrs, baselines, cfg)
	for _, b := range baseSides {
		defer b.procs[0].Kill()
	}
	if err != nil {
		return "", err
	}
	sides = append(sides, baseSides...)
	raftSide := -1
	if cfg.raftReplicas > 0 {
		group, err := startRaftGroup(ctx, dir, binary, kubeconfig, crawl, kube, "lease-bench-raft", cfg.raftReplicas, addrs, cfg)
		for _, p := range group.procs {
			defer p.Kill()
		}
		if err != nil {
			return "", err
		}
		raftSide = len(sides)
		sides = append(sides, group)
	}
	progress("warming up")
	for _, s := range sides {
		if _, err := measure(ctx, s, cfg.clients, time.Second); err != nil {
			return "", fmt.Errorf("phase \"warm-up, %s\": %w", s.name, err)
		}
	}
	load := loadAverage()
	results, err := measureRounds(ctx, sides, cfg)
	if err != nil {
		return "", err
	}
	if cfg.cpuProfile != "" {
		progress("profiling the operator over one more lease round")
		if err := profile(ctx, sides[1], cfg, cfg.cpuProfile); err != nil {
			return "", fmt.Errorf("phase \"profile\": %w", err)
		}
	}
	if cfg.raftProfile != "" && raftSide > 0 {
		progress("profiling the raft replicas over one more lease round")
		if err := profile(ctx, sides[raftSide], cfg, cfg.raftProfile); err != nil {
			return "", fmt.Errorf("phase \"raft profile\": %w", err)
		}
	}
	report := format(cfg, load, loadAverage(), results)
	for i, b := range baselines {
		report += formatAB(cfg, b.name, results, 2+i)
	}
	if raftSide > 0 {
		report += formatRaft(cfg, results, raftSide, len(sides[raftSide].procs))
		memory, err := raftMemory(ctx, sides[raftSide], crawl, addrs, cfg.memoryProxies, cfg.memoryCooldowns, cfg)
		if err != nil {
			return report, err
		}
		report += memory
	}
	return report, nil
}

// buildOperators builds this tree's operator and the baselines into dir.
func buildOperators(ctx context.Context, dir string) (string, []baseline, error) {
	progress("building cmd/proxy-operator")
	if err := benchkit.Build(ctx, dir, "proxy-operator"); err != nil {
		return "", nil, err
	}
	baselines, err := buildBaselines(ctx, dir)
	return filepath.Join(dir, "proxy-operator"), baselines, err
}

// benchClients are the bench's own clients of the API server, with room
// to create the proxies quickly.
func benchClients(cfg *rest.Config) (versioned.Interface, kubernetes.Interface, error) {
	benchCfg := rest.CopyConfig(cfg)
	benchCfg.QPS, benchCfg.Burst = 1000, 2000
	crawl, err := versioned.NewForConfig(benchCfg)
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	return crawl, kube, err
}

// measureRounds measures every side cfg.rounds times; each round starts
// with the next side, so every side goes first, second, ... equally often.
func measureRounds(ctx context.Context, sides []side, cfg config) ([][]result, error) {
	var results [][]result
	for r := range cfg.rounds {
		res := make([]result, len(sides))
		for k := range sides {
			i := (r + k) % len(sides)
			got, err := measure(ctx, sides[i], cfg.clients, cfg.round)
			if err != nil {
				return nil, fmt.Errorf("phase \"round %d, %s\": %w", r+1, sides[i].name, errors.Join(err, sides[i].exitErr()))
			}
			res[i] = got
		}
		progress("round %d: %s", r+1, roundLine(sides, res))
		results = append(results, res)
	}
	return results, nil
}

// startOperator starts binary leading namespace ns with one External proxy
// per fleet address, and waits until the lease API lists them all Ready.
func startOperator(ctx context.Context, dir, binary, kubeconfig string, crawl versioned.Interface, kube kubernetes.Interface, ns string, addrs []string, cfg config) (*benchkit.Process, *leaseclient.Client, error) {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("creating the namespace: %w", err)
	}
	progress("starting %s for namespace %s", binary, ns)
	op, err := benchkit.Start(binary, filepath.Join(dir, ns+".log"), 2, func(ports []int) []string {
		return []string{
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]), fmt.Sprintf("--lease-addr=127.0.0.1:%d", ports[1]),
			"--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--leader-elect-namespace=" + ns,
			"--lease-auth=none", "--profiling",
		}
	})
	if err != nil {
		return nil, nil, err
	}
	c, err := populate(ctx, op, crawl, ns, addrs, cfg)
	if err != nil {
		op.Kill()
		return nil, nil, err
	}
	return op, c, nil
}

// populate waits for op to lead, creates the proxies and waits for them.
func populate(ctx context.Context, op *benchkit.Process, crawl versioned.Interface, ns string, addrs []string, cfg config) (*leaseclient.Client, error) {
	if err := op.WaitReady(ctx, "http://"+op.Addr(1)+"/readyz", time.Minute); err != nil {
		return nil, fmt.Errorf("phase \"operator leads\": %w", err)
	}
	if err := createProxies(ctx, crawl, ns, addrs, 0, cfg.proxies); err != nil {
		return nil, err
	}
	c, err := newClient("http://"+op.Addr(1), cfg.clients)
	if err != nil {
		return nil, err
	}
	if err := waitLeasable(ctx, c, ns, cfg.proxies, cfg.timeout); err != nil {
		return nil, fmt.Errorf("phase \"all proxies Ready in the lease store\": %w", errors.Join(err, op.ExitErr()))
	}
	return c, nil
}

// createProxies creates the External proxies from..to-1 of addrs in ns.
func createProxies(ctx context.Context, crawl versioned.Interface, ns string, addrs []string, from, to int) error {
	progress("creating %d External proxies in %s", to-from, ns)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := from; i < to; i++ {
		g.Go(func() error {
			_, err := crawl.CrawlV1alpha1().Proxies(ns).Create(gctx, newProxy(ns, i, addrs[i]), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("phase \"create proxies\": %w", err)
	}
	return nil
}

// side is one server the clients measure: one process, or the replicas
// of a group, client w calling replica w mod len(clients) as the leases
// Service would spread them.
type side struct {
	name    string
	clients []*leaseclient.Client
	procs   []*benchkit.Process
	ns      string // where its proxies are
	// countFailures: a failed pair is counted, not the end of the run.
	// Replicas can change leader under load (their calls then answer
	// NotLeader until the new one leads); a client retries, the bench
	// counts.
	countFailures bool
}

// exitErr is the first of the side's processes to have exited, if any.
func (s side) exitErr() error {
	var errs []error
	for _, p := range s.procs {
		errs = append(errs, p.ExitErr())
	}
	return errors.Join(errs...)
}

// cpu is the CPU time the side's processes have used so far.
func (s side) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, p := range s.procs {
		c, err := procstat.CPU(p.PID())
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// result is one measurement of one side.
type result struct {
	pairs       int
	pairsPerSec float64
	p50, p99    time.Duration
	cpuPerPair  time.Duration // the server process's CPU
	serverCores float64
	// failed counts the pairs that failed, on a side that counts them.
	failed int64
}

// measure runs acquire+release pairs from clients goroutines for d.
func measure(ctx context.Context, s side, clients int, d time.Duration) (result, error) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  atomic.Int64
		firstErr  error
	)
	cpuBefore, err := s.cpu()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			holder := "bench-" + strconv.Itoa(w)
			mine := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				c := s.clients[w%len(s.clients)]
				l, err := c.Acquire(ctx, leaseclient.AcquireRequest{Holder: holder, Namespace: s.ns})
				if err == nil {
					err = c.Release(ctx, l.ID, leaseclient.OutcomeOK, "")
				}
				if err != nil {
					failures.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuAfter, err := s.cpu()
	if err != nil {
		return result{}, err
	}
	if firstErr != nil && (!s.countFailures || len(latencies) == 0) {
		return result{}, fmt.Errorf("%d pairs failed, the first: %w", failures.Load(), firstErr)
	}
	if len(latencies) == 0 {
		return result{}, errors.New("no pair completed")
	}
	slices.Sort(latencies)
	cpu := cpuAfter - cpuBefore
	return result{
		pairs:       len(latencies),
		pairsPerSec: float64(len(latencies)) / elapsed.Seconds(),
		p50:         latencies[len(latencies)/2],
		p99:         latencies[len(latencies)*99/100],
		cpuPerPair:  cpu / time.Duration(len(latencies)),
		serverCores: cpu.Seconds() / elapsed.Seconds(),
		failed:      failures.Load(),
	}, nil
}

// profile takes a CPU profile of each of the side's processes during one
// more lease round: into path for one process, path.0, path.1, ... for
// several.
func profile(ctx context.Context, s side, cfg config, path string) error {
	seconds := max(1, int(cfg.round.Seconds()))
	got := make(chan error, len(s.procs))
	for i, op := range s.procs {
		out := path
		if len(s.procs) > 1 {
			out = path + "." + strconv.Itoa(i)
		}
		go func() { got <- fetchProfile(op, seconds, out) }()
	}
	if _, err := measure(ctx, s, cfg.clients, time.Duration(seconds)*time.Second+500*time.Millisecond); err != nil {
		return err
	}
	var errs []error
	for range s.procs {
		errs = append(errs, <-got)
	}
	return errors.Join(errs...)
}

// fetchProfile writes op's CPU profile over seconds to path.
func fetchProfile(op *benchkit.Process, seconds int, path string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", op.Addr(0), seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// newClient is the lease client both sides get: connections kept for every
// concurrent client.
func newClient(url string, clients int) (*leaseclient.Client, error) {
	return leaseclient.New(url, leaseclient.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients},
		Timeout:   30 * time.Second,
	}))
}

// newProxy is the i-th External proxy, at the fleet listener addr (which
// answers the probe itself), leased by one client at a time.
func newProxy(ns string, i int, addr string) *crawlv1alpha1.Proxy {
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("px-%05d", i)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:      crawlv1alpha1.ModeExternal,
			Endpoint:  &crawlv1alpha1.Endpoint{Host: host, Port: int32(portNum)},
			MaxLeases: 1,
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:            "http://127.0.0.1:9/generate_204",
				ExpectedStatus: http.StatusNoContent,
				Interval:       &metav1.Duration{Duration: 30 * time.Second},
				Timeout:        &metav1.Duration{Duration: 5 * time.Second},
			},
		},
	}
}

// waitLeasable waits until the lease API lists n Ready proxies in ns.
func waitLeasable(ctx context.Context, c *leaseclient.Client, ns string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := 0
	for {
		proxies, err := c.Proxies(ctx, ns, "")
		if err == nil {
			if last = len(proxies); last >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d proxies leasable after %v (last error: %v)", last, n, timeout, err)
		case <-time.After(time.Second):
		}
	}
}
