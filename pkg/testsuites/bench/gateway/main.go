// Command bench measures the gateway against the forward proxy it chains
// to, side by side in one run on loopback (make bench writes the table into
// docs/benchmarks.md). The parties are separate processes: this bench (64
// concurrent clients and the origins they reach), cmd/forward-proxy (the
// upstream, with basic auth), cmd/proxy-operator (the lease API) on a real
// kube-apiserver with an External Proxy for the forward-proxy, and the
// gateway in rotating mode (a lease acquired and released per tunnel, a
// username to parse, the upstream's credentials to add): two
// `proxy-operator gateway` replicas calling the lease API over HTTP (the
// tier, as installed). Measured: new CONNECT tunnels
// per second (one request each; a TLS handshake and an HTTPS GET each),
// bulk bytes per second through established tunnels, latency per tunnel,
// and each process's CPU time per tunnel or per GiB; in two topologies
// (every process on every core; the gateway on a core of its own, as in
// its own Pod). It asserts nothing.
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const (
	upstreamUser, upstreamPassword = "fleet", "bench-secret"
	namespace                      = "gateway-bench"
)

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 64, "concurrent clients")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long each measurement runs")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds per measurement, alternating which path goes first; the table shows the medians")
	flag.StringVar(&o.operator, "operator", "", "a prebuilt cmd/proxy-operator to measure (default: built from this tree), for before/after comparisons")
	flag.StringVar(&o.topologies, "topologies", "shared,own-core", "which placements to measure: shared (every process on every core), own-core (the gateway on a core of its own)")
	flag.StringVar(&o.kinds, "measurements", "tunnels,tls,bulk", "which measurements to run: tunnels (one request each), tls (a TLS handshake and a GET each), bulk")
	flag.Parse()
	out, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

type options struct {
	clients    int
	duration   time.Duration
	rounds     int
	operator   string
	topologies string
	kinds      string
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// setup is everything a measurement needs.
type setup struct {
	o                    options
	origins              *origins
	upstream, gateway    string // host:port of the forward-proxy and the gateway (its first replica)
	upstreamAuth, gwAuth string
	meter                meter
	fp, op               *child
	operatorMetrics      string
	// replicas are the gateway tier's processes and addresses.
	replicas     []*child
	replicaAddrs []string
}

func run(ctx context.Context, o options) (string, error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	progress("building cmd/forward-proxy%s", map[bool]string{true: " and cmd/proxy-operator", false: ""}[o.operator == ""])
	operatorBin, fpBin, err := buildBinaries(ctx, dir, o.operator)
	if err != nil {
		return "", err
	}
	s := &setup{o: o,
		upstreamAuth: base64.StdEncoding.EncodeToString([]byte(upstreamUser + ":" + upstreamPassword)),
		gwAuth:       base64.StdEncoding.EncodeToString([]byte("ns-" + namespace + ":none")),
	}
	if s.origins, err = startOrigins(); err != nil {
		return "", err
	}
	defer s.origins.close()

	fpPort, err := freePort()
	if err != nil {
		return "", err
	}
	s.upstream = fmt.Sprintf("127.0.0.1:%d", fpPort)
	if s.fp, err = start("forward-proxy", fpBin, filepath.Join(dir, "forward-proxy.log"),
		[]string{"PROXY_USERNAME=" + upstreamUser, "PROXY_PASSWORD=" + upstreamPassword},
		"--listen="+s.upstream, "--allow-cidr=127.0.0.0/8", "--max-conns=0"); err != nil {
		return "", err
	}
	defer s.fp.stop()
	if err := waitDial(ctx, s.upstream, 30*time.Second); err != nil {
		return "", err
	}

	progress("starting kube-apiserver and etcd")
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return "", err
	}
	defer env.Stop()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	if err := createUpstream(ctx, kubernetes.NewForConfigOrDie(env.Config), versioned.NewForConfigOrDie(env.Config), s); err != nil {
		return "", err
	}
	if s.op, err = startGateways(s, operatorBin, dir, kubeconfig); err != nil {
		return "", err
	}
	defer s.op.stop()
	for _, r := range s.replicas {
		defer r.stop()
	}
	progress("waiting for the Proxy to be Ready and the gateway to tunnel through it")
	if err := waitTunnel(ctx, s, 2*time.Minute); err != nil {
		logs, _ := os.ReadFile(filepath.Join(dir, "operator.log"))
		return "", fmt.Errorf("%w; operator log:\n%s", err, logs)
	}
	s.meter = meter{upstreamPID: s.fp.pid(), leasesPID: s.op.pid()}
	for _, r := range s.replicas {
		s.meter.gatewayPIDs = append(s.meter.gatewayPIDs, r.pid())
	}

	var b strings.Builder
	loadStart := loadavg()
	fmt.Fprintf(&b, "gateway benchmark: %s, %d cores, %d clients, %v per measurement, %d rounds alternating which path goes first, medians shown.\n\n",
		runtime.Version(), runtime.NumCPU(), o.clients, o.duration, o.rounds)
	fmt.Fprintf(&b, "Processes: this bench (the clients and the origins they reach), cmd/forward-proxy (the upstream, basic auth), "+
		"%s (rotating mode: a lease acquired and released per tunnel, the upstream's credentials added), "+
		"kube-apiserver and etcd (idle during the measurements, never pinned). "+
		"The reference is the same clients straight to the same forward-proxy, in the same run.\n\n", gatewayWords)

	// Warm up both paths.
	for _, p := range []string{s.upstream, s.gateway} {
		newTunnels(p, s.origins.echo, s.authFor(p), o.clients, time.Second, pingExchange)
	}
	for _, topo := range strings.Split(o.topologies, ",") {
		t, err := s.placement(topo)
		if err != nil {
			return "", err
		}
		progress("topology %s", topo)
		if err := t.apply(s); err != nil {
			return "", err
		}
		m, err := s.measureAll()
		if err != nil {
			return "", fmt.Errorf("topology %s: %w", topo, err)
		}
		fmt.Fprintf(&b, "**%s**\n\n", t.title)
		b.WriteString(m.table())
		b.WriteString("\n")
		fmt.Fprintf(&b, "CPU time per tunnel (per GiB for bulk) by process, %s:\n\n", topo)
		b.WriteString(m.cpuTable())
		b.WriteString("\n")
		fmt.Fprintf(&b, "Work per CPU-second of one process, %s: the forward-proxy's straight (the reference) beside the gateway's, "+
			"from the CPU times above; with a core of its own a process can do at most this much:\n\n", topo)
		b.WriteString(m.capacityTable())
		b.WriteString("\n")
	}
	if len(s.replicas) > 1 {
		if err := (placement{load: allCPUs(), upstream: allCPUs(), gateway: allCPUs()}).apply(s); err != nil {
			return "", err
		}
		progress("one replica against two")
		out, err := s.measureReplicas(ctx)
		if err != nil {
			return "", err
		}
		b.WriteString(out)
	}
	left, err := leasesLeft(ctx, s.operatorMetrics)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "Leases left behind by the gateway's rotating mode after the run: %v. Load average %s at the start, %s at the end.\n", left, loadStart, loadavg())
	return b.String(), nil
}

func (s *setup) authFor(proxy string) string {
	if proxy == s.gateway {
		return s.gwAuth
	}
	return s.upstreamAuth
}

// createUpstream registers the forward-proxy as an External Proxy with its
// credentials in a Secret, probed through itself every second.
func createUpstream(ctx context.Context, kube kubernetes.Interface, crawl versioned.Interface, s *setup) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fp-auth", Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		StringData: map[string]string{crawlv1alpha1.AuthUsernameKey: upstreamUser, crawlv1alpha1.AuthPasswordKey: upstreamPassword}}
	if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return err
	}
	var port int32
	fmt.Sscanf(s.upstream[strings.LastIndexByte(s.upstream, ':')+1:], "%d", &port)
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "fp"}, Spec: crawlv1alpha1.ProxySpec{
		Mode:     crawlv1alpha1.ModeExternal,
		Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: port},
		Auth:     &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret.Name}},
		// Tunnels end a moment after their client closes: room for those.
		MaxLeases: int32(s.o.clients) * 8,
		HealthCheck: crawlv1alpha1.HealthCheck{URL: s.origins.health, Interval: &metav1.Duration{Duration: time.Second},
			Timeout: &metav1.Duration{Duration: 900 * time.Millisecond}},
	}}
	_, err := crawl.CrawlV1alpha1().Proxies(namespace).Create(ctx, proxy, metav1.CreateOptions{})
	return err
}

// waitTunnel waits until a tunnel through the gateway carries a ping.
func waitTunnel(ctx context.Context, s *setup, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		c, br, err := tunnel(s.gateway, s.origins.echo, s.gwAuth)
		if err == nil {
			err = pingExchange(c, br)
			c.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("no tunnel through the gateway within %v: %w", timeout, last)
}

// leasesLeft is the operator's live leases, once the last tunnels closed.
func leasesLeft(ctx context.Context, metricsURL string) (float64, error) {
	var n float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		m, err := operatortest.Scrape(ctx, metricsURL)
		if err != nil {
			return 0, err
		}
		n, _ = m.Value("proxy_operator_leases_active", nil)
		if n == 0 || time.Now().After(deadline) {
			return n, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// placement is where the processes run.
type placement struct {
	title string
	// load, upstream, gateway are taskset CPU lists.
	load, upstream, gateway string
}

func (s *setup) placement(name string) (placement, error) {
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	switch name {
	case "shared":
		return placement{title: fmt.Sprintf("Shared: every process on all %d cores (the clients, the forward-proxy and the gateway take CPU from each other).", runtime.NumCPU()),
			load: all, upstream: all, gateway: all}, nil
	case "own-core":
		if runtime.NumCPU() < 2 {
			return placement{}, fmt.Errorf("topology own-core needs 2 cores, this machine has %d", runtime.NumCPU())
		}
		return placement{title: fmt.Sprintf("Gateway on a core of its own: the bench and the forward-proxy pinned to CPU 0 in both paths, the gateway replicas and the operator (the lease API) to CPU 1 (as the gateway in its own Pods; other users of this machine still share both cores)."),
			load: "0", upstream: "0", gateway: fmt.Sprintf("1-%d", runtime.NumCPU()-1)}, nil
	}
	return placement{}, fmt.Errorf("unknown topology %q (want shared or own-core)", name)
}

func (p placement) apply(s *setup) error {
	if err := pin(os.Getpid(), p.load); err != nil {
		return err
	}
	if err := pin(s.fp.pid(), p.upstream); err != nil {
		return err
	}
	// The lease API's process goes with the gateway: it works per tunnel.
	for _, c := range append([]*child{s.op}, s.replicas...) {
		if err := pin(c.pid(), p.gateway); err != nil {
			return err
		}
	}
	return nil
}

func allCPUs() string { return fmt.Sprintf("0-%d", runtime.NumCPU()-1) }

// kind is one measurement.
type kind struct {
	name   string
	target string
	bulk   bool
	ping   bool
}

// measurements are the rounds of each kind on both paths.
type measurements struct {
	kinds   []kind
	direct  [][]result // [kind][round]
	through [][]result
}

func (s *setup) measureAll() (*measurements, error) {
	all := map[string]kind{
		"tunnels": {name: "new CONNECT tunnels/s (one request each)", target: s.origins.echo, ping: true},
		"tls":     {name: "new CONNECT tunnels/s (TLS handshake + one HTTPS GET each)", target: s.origins.tls},
		"bulk":    {name: "bulk through established tunnels", target: s.origins.source, bulk: true},
	}
	m := &measurements{}
	for _, name := range strings.Split(s.o.kinds, ",") {
		k, ok := all[name]
		if !ok {
			return nil, fmt.Errorf("unknown measurement %q (want tunnels, tls or bulk)", name)
		}
		m.kinds = append(m.kinds, k)
	}
	for _, k := range m.kinds {
		var direct, through []result
		for round := range s.o.rounds {
			paths := []string{s.upstream, s.gateway}
			if round%2 == 1 {
				slices.Reverse(paths)
			}
			for _, p := range paths {
				r, err := s.measure(k, p)
				if err != nil {
					return nil, err
				}
				if p == s.gateway {
					through = append(through, r)
				} else {
					direct = append(direct, r)
				}
			}
		}
		progress("%s: direct %.0f, through %.0f (medians)", k.name, median(direct, perSecond), median(through, perSecond))
		m.direct, m.through = append(m.direct, direct), append(m.through, through)
	}
	return m, nil
}

func (s *setup) measure(k kind, proxy string) (result, error) {
	before, err := s.meter.read()
	if err != nil {
		return result{}, err
	}
	var r result
	switch {
	case k.bulk:
		if r, err = bulk(proxy, k.target, s.authFor(proxy), s.o.clients, s.o.duration); err != nil {
			return result{}, fmt.Errorf("bulk via %s: %w", proxy, err)
		}
	case k.ping:
		r = newTunnels(proxy, k.target, s.authFor(proxy), s.o.clients, s.o.duration, pingExchange)
	default:
		r = newTunnels(proxy, k.target, s.authFor(proxy), s.o.clients, s.o.duration, httpsExchange)
	}
	after, err := s.meter.read()
	if err != nil {
		return result{}, err
	}
	r.cpu = after.minus(before)
	return r, nil
}

func perSecond(r result) float64 { return r.perSecond }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

func (m *measurements) table() string {
	var b strings.Builder
	b.WriteString("| measurement | straight to forward-proxy | through the gateway | ratio | target |\n|---|---:|---:|---:|---:|\n")
	var failedDirect, failedThrough int64
	for i, k := range m.kinds {
		d, t := median(m.direct[i], perSecond), median(m.through[i], perSecond)
		target := "≥ 0.8×"
		if k.bulk {
			target = "≥ 0.9×"
			fmt.Fprintf(&b, "| %s | %.0f MiB/s | %.0f MiB/s | %.2f× | %s |\n", k.name, d/(1<<20), t/(1<<20), t/d, target)
		} else {
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f× | %s |\n", k.name, d, t, t/d, target)
		}
		for _, r := range m.direct[i] {
			failedDirect += r.errors
		}
		for _, r := range m.through[i] {
			failedThrough += r.errors
		}
	}
	for i, k := range m.kinds {
		if k.bulk {
			continue
		}
		what := "tunnel + request"
		if !k.ping {
			what = "tunnel + TLS + GET"
		}
		for _, q := range []struct {
			name string
			f    func(result) float64
		}{{"p50", func(r result) float64 { return float64(r.p50) }}, {"p99", func(r result) float64 { return float64(r.p99) }}} {
			d, t := time.Duration(median(m.direct[i], q.f)), time.Duration(median(m.through[i], q.f))
			fmt.Fprintf(&b, "| %s latency %s | %v | %v | %+v added | reported |\n", what, q.name, round(d), round(t), round(t-d))
		}
	}
	fmt.Fprintf(&b, "| failed tunnels (all rounds) | %d | %d | | 0 |\n", failedDirect, failedThrough)
	return b.String()
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Millisecond || d < -10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// cpuTable: CPU per unit of work, by process, medians of the rounds.
func (m *measurements) cpuTable() string {
	var b strings.Builder
	b.WriteString("| measurement | path | bench (clients, origins) | forward-proxy | gateway | lease API (operator) | total |\n|---|---|---:|---:|---:|---:|---:|\n")
	for i, k := range m.kinds {
		unit, per := "µs/tunnel", func(d time.Duration, r result) float64 { return float64(d.Microseconds()) / max(r.count, 1) }
		if k.bulk {
			unit, per = "ms/GiB", func(d time.Duration, r result) float64 { return float64(d.Milliseconds()) / max(r.count/(1<<30), 1e-9) }
		}
		for _, path := range []struct {
			name string
			rs   []result
		}{{"direct", m.direct[i]}, {"through the gateway", m.through[i]}} {
			f := func(g func(cpuSpent) time.Duration) float64 {
				return median(path.rs, func(r result) float64 { return per(g(r.cpu), r) })
			}
			load := f(func(c cpuSpent) time.Duration { return c.load })
			up := f(func(c cpuSpent) time.Duration { return c.upstream })
			gw := f(func(c cpuSpent) time.Duration { return c.gateway })
			leases := f(func(c cpuSpent) time.Duration { return c.leases })
			tot := f(func(c cpuSpent) time.Duration { return c.load + c.upstream + c.gateway + c.leases })
			fmt.Fprintf(&b, "| %s | %s | %.0f %s | %.0f %s | %.0f %s | %.0f %s | %.0f %s |\n", short(k.name), path.name, load, unit, up, unit, gw, unit, leases, unit, tot, unit)
		}
	}
	return b.String()
}

// capacityTable: how much work one CPU-second of the forward-proxy does
// straight, and of the gateway through it; the ratio is what the gateway
// would sustain beside the upstream if each had a core of its own.
func (m *measurements) capacityTable() string {
	var b strings.Builder
	b.WriteString("| measurement | forward-proxy, straight | gateway | ratio | target |\n|---|---:|---:|---:|---:|\n")
	for i, k := range m.kinds {
		perCPU := func(rs []result, g func(cpuSpent) time.Duration) float64 {
			return median(rs, func(r result) float64 { return r.count / max(g(r.cpu).Seconds(), 1e-9) })
		}
		up := perCPU(m.direct[i], func(c cpuSpent) time.Duration { return c.upstream })
		gw := perCPU(m.through[i], func(c cpuSpent) time.Duration { return c.gateway })
		if k.bulk {
			fmt.Fprintf(&b, "| %s | %.2f GiB | %.2f GiB | %.2f× | ≥ 0.9× |\n", short(k.name), up/(1<<30), gw/(1<<30), gw/up)
		} else {
			fmt.Fprintf(&b, "| %s | %.0f tunnels | %.0f tunnels | %.2f× | ≥ 0.8× |\n", short(k.name), up, gw, gw/up)
		}
	}
	return b.String()
}

func short(name string) string {
	switch {
	case strings.HasPrefix(name, "bulk"):
		return "bulk"
	case strings.Contains(name, "TLS"):
		return "new tunnels, TLS + GET"
	}
	return "new tunnels, one request"
}
