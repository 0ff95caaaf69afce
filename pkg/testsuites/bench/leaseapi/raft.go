package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// The replicated part (issue 62): three --lease-replication=raft replicas
// of the operator as one side of the rounds, and their memory once loaded.

// Issue 62's cost target: the three replicas' pairs/s against one process's.
const targetRaftRatio = 0.5

var (
	raftReplicas    = flag.Int("raft-replicas", 3, "replicas of the --lease-replication=raft side (0: leave it out)")
	memoryProxies   = flag.Int("memory-proxies", 10_000, "proxies the raft replicas lead when their memory is read")
	memoryCooldowns = flag.Int("memory-cooldowns", 100_000, "cool-downs (banned releases, a site each) made before the raft replicas' memory is read")
)

// startRaftGroup starts n replicas of binary with --lease-replication=raft
// leading namespace ns, each with a Pod object of its own (there is no
// kubelet: the bench plays it, as pkg/testsuites/replication does) and
// its peer port on loopback, creates the proxies and waits until every
// replica lists them all. The processes it returns were started, also on
// an error.
func startRaftGroup(ctx context.Context, dir, binary, kubeconfig string, crawl versioned.Interface, kube kubernetes.Interface, ns string, n int, addrs []string, cfg config) (side, error) {
	s := side{name: fmt.Sprintf("%d raft replicas", n), ns: ns, countFailures: true}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return s, fmt.Errorf("creating the namespace: %w", err)
	}
	selector := "replicas-of=" + ns
	for i := range n {
		name := "replica-" + strconv.Itoa(i)
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"replicas-of": ns}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "proxy-operator:bench"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return s, fmt.Errorf("creating the Pod %s: %w", name, err)
		}
		progress("starting %s as %s of namespace %s", binary, name, ns)
		p, err := benchkit.Start(binary, filepath.Join(dir, ns+"-"+name+".log"), 3, func(ports []int) []string {
			peer := fmt.Sprintf("127.0.0.1:%d", ports[2])
			return []string{
				fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]), fmt.Sprintf("--lease-addr=127.0.0.1:%d", ports[1]),
				"--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--leader-elect-namespace=" + ns,
				"--lease-auth=none", "--profiling",
				"--lease-replication=raft", "--replica-selector=" + selector, "--replica-id=" + string(pod.UID),
				"--pod-name=" + name, "--pod-namespace=" + ns,
				"--peer-addr=" + peer, "--peer-advertise=" + peer, "--raft-dir=" + filepath.Join(dir, ns+"-"+name+"-raft"),
			}
		})
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, p)
	}
	// The metrics port's /readyz is the Pod's readiness: 200 once the
	// replica votes in the group.
	for _, p := range s.procs {
		if err := p.WaitReady(ctx, "http://"+p.Addr(0)+"/readyz", 2*time.Minute); err != nil {
			return s, fmt.Errorf("phase \"raft replicas ready\": %w", err)
		}
	}
	if err := createProxies(ctx, crawl, ns, addrs, 0, cfg.proxies); err != nil {
		return s, err
	}
	for _, p := range s.procs {
		c, err := newClient("http://"+p.Addr(1), cfg.clients)
		if err != nil {
			return s, err
		}
		if err := waitLeasable(ctx, c, ns, cfg.proxies, cfg.timeout); err != nil {
			return s, fmt.Errorf("phase \"all proxies Ready on every raft replica\": %w", errors.Join(err, s.exitErr()))
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

// formatRaft is the table of the replicas (results' column raftSide)
// against the one process (column 1), measured in the same rounds.
func formatRaft(cfg config, results [][]result, raftSide, replicas int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d --lease-replication=raft replicas (clients spread over their lease addresses, client i to replica i mod %d) beside one process (--lease-replication=none), %d rounds of %v, alternating; CPU/pair is the processes' sum.\n",
		replicas, replicas, len(results), cfg.round)
	b.WriteString("A failed pair (a replica answering NotLeader while the group changes leader) is counted, not retried; pairs/s counts the others.\n\n")
	b.WriteString("| round | one process pairs/s | replicas pairs/s | ratio | one process p50 | replicas p50 | one process p99 | replicas p99 | one process CPU/pair | replicas CPU/pair | replicas' failed pairs |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var ratios []float64
	for i, r := range results {
		o, g := r[1], r[raftSide]
		ratio := g.pairsPerSec / o.pairsPerSec
		ratios = append(ratios, ratio)
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× | %v | %v | %v | %v | %v | %v | %d |\n", i+1, o.pairsPerSec, g.pairsPerSec, ratio,
			round(o.p50), round(g.p50), round(o.p99), round(g.p99), o.cpuPerPair.Round(time.Microsecond), g.cpuPerPair.Round(time.Microsecond), g.failed)
	}
	ratio := median(ratios)
	fmt.Fprintf(&b, "\nMedian of %d rounds: replicas/one process pairs/s **%.2f×** (target ≥ %.1f×: %s).\n", len(results), ratio, targetRaftRatio, verdict(ratio >= targetRaftRatio))
	return b.String()
}

// raftMemory grows the group's fleet to proxies, makes cooldowns
// cool-downs (an acquire for a site of its own, released banned) through
// the replicas, and reports each replica's RSS before and after, with the
// cool-downs each replica's store counts.
func raftMemory(ctx context.Context, s side, crawl versioned.Interface, addrs []string, proxies, cooldowns int, cfg config) (string, error) {
	before, err := rssOf(s.procs)
	if err != nil {
		return "", err
	}
	began := time.Now()
	if proxies > cfg.proxies {
		if err := createProxies(ctx, crawl, s.ns, addrs, cfg.proxies, proxies); err != nil {
			return "", err
		}
		for _, c := range s.clients {
			if err := waitLeasable(ctx, c, s.ns, proxies, cfg.timeout); err != nil {
				return "", fmt.Errorf("phase \"%d proxies Ready on every raft replica\": %w", proxies, errors.Join(err, s.exitErr()))
			}
		}
	}
	fleetTook := time.Since(began)
	progress("%d proxies leasable on every replica after %v; making %d cool-downs", proxies, fleetTook.Round(time.Second), cooldowns)
	began = time.Now()
	failed, err := makeCooldowns(ctx, s, cooldowns, cfg.clients)
	if err != nil {
		return "", fmt.Errorf("phase \"cool-downs\": %w", errors.Join(err, s.exitErr()))
	}
	cooldownsTook := time.Since(began)
	after, err := rssOf(s.procs)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nEach replica's memory (RSS, /proc/PID/status) after the rounds (%d proxies) and after growing the fleet to %d proxies (%v to all leasable on every replica) and making %d cool-downs through the replicas (%v: an acquire for a site of its own, released banned; %d clients; %d pairs failed and were made again).\n\n",
		cfg.proxies, proxies, fleetTook.Round(time.Second), cooldowns, cooldownsTook.Round(time.Second), cfg.clients, failed)
	b.WriteString("| replica | Raft | RSS after the rounds (MiB) | RSS loaded (MiB) | cool-down entries its store counts |\n|---|---|---:|---:|---:|\n")
	for i, p := range s.procs {
		metrics := "http://" + p.Addr(0) + "/metrics"
		entries, err := scrapeGauge(ctx, metrics, `proxy_operator_lease_state_entries{kind="cooldowns"}`)
		shown := strconv.FormatFloat(entries, 'f', 0, 64)
		if err != nil {
			shown = "(" + err.Error() + ")"
		}
		role := "follower"
		if leads, err := scrapeGauge(ctx, metrics, "proxy_operator_lease_store_raft_leader"); err != nil {
			role = "(" + err.Error() + ")"
		} else if leads == 1 {
			role = "leader"
		}
		fmt.Fprintf(&b, "| replica-%d | %s | %.1f | %.1f | %s |\n", i, role, mib(before[i]), mib(after[i]), shown)
	}
	return b.String(), nil
}

// makeCooldowns makes n cool-downs from clients goroutines spread over
// the side's replicas: each pair acquires for a site of its own and
// releases it banned. A failed pair (NotLeader while the group changes
// leader) is counted and another site tried; it gives up past n/100.
func makeCooldowns(ctx context.Context, s side, n, clients int) (failed int64, err error) {
	var next, made, failures atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for w := range clients {
		wg.Go(func() {
			c := s.clients[w%len(s.clients)]
			holder := "bench-" + strconv.Itoa(w)
			for made.Add(1) <= int64(n) {
				domain := "ban-" + strconv.FormatInt(next.Add(1), 10) + ".com"
				l, err := c.Acquire(ctx, leaseclient.AcquireRequest{Holder: holder, Namespace: s.ns, Domain: domain})
				if err == nil {
					err = c.Release(ctx, l.ID, leaseclient.OutcomeBanned, domain)
				}
				if err == nil {
					continue
				}
				made.Add(-1)
				if failures.Add(1) > int64(n/100) {
					errs[w] = fmt.Errorf("more than %d pairs failed, the last: %w", n/100, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return failures.Load(), errors.Join(errs...)
}

func rssOf(procs []*benchkit.Process) ([]int64, error) {
	var out []int64
	for _, p := range procs {
		rss, err := procstat.RSS(p.PID())
		if err != nil {
			return nil, err
		}
		out = append(out, rss)
	}
	return out, nil
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// scrapeGauge is the value of the series named exactly series (name and
// labels as the exposition writes them) at url.
func scrapeGauge(ctx context.Context, url, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s", series)
}

var (
	raftProfile = flag.String("raft-cpuprofile", "", "if set, write a CPU profile of each raft replica (FILE.0, FILE.1, ...) taken during one more lease round")
	quick       = flag.Bool("quick", false, "small defaults for a try in a few minutes: 200 proxies, 32 clients, 3 rounds of 2 s, memory at 1,000 proxies and 10,000 cool-downs (flags given still count)")
)

// quickDefaults sets each flag of values that the command line did not set.
func quickDefaults(values map[string]string) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range values {
		if !set[name] {
			if err := flag.Set(name, v); err != nil {
				fail(err)
			}
		}
	}
}
