// Command bench measures ProxyPool autoscaling (issue 15) in two parts.
//
// Scale from zero, measured: the operator binary on a real kube-apiserver
// and etcd (pkg/testing/testenv) with the local provider's forward-proxy
// processes; a pool with minReplicas 0 at zero members takes one acquire
// that waits, and the time to its 201 is measured, round after round (the
// pool goes back to zero in between). Beside it, in the same run: the time
// the local provider alone takes from Create to a Running instance (called
// directly, no operator), and the probe interval, since a new member is
// Ready only after its first probe, which lands within one interval.
//
// Proxy-hours, simulated: a bursty demand trace (a day of crawl jobs,
// deterministic) run through the autoscaler's own decision function
// (pool.Autoscale, every 5 s) with members taking a fixed start-up time,
// beside a pool fixed at the trace's peak. It reports proxy-hours and the
// worker-seconds spent waiting for a member (the price of scaling).
//
//	go run ./pkg/testsuites/bench/autoscale
//
// It prints markdown on stdout and progress on stderr. It asserts nothing,
// but fails naming the phase that did not finish.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/pool"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

const (
	rounds        = 5
	probeInterval = time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	measured, err := measure(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "autoscale bench:", err)
		os.Exit(1)
	}
	fmt.Print(measured)
	fmt.Println()
	fmt.Print(simulate())
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s autoscale bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func measure(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "autoscale-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	progress("building cmd/proxy-operator and cmd/forward-proxy")
	if err := benchkit.Build(ctx, dir, "proxy-operator", "forward-proxy"); err != nil {
		return "", err
	}

	// The reference: the provider alone, Create to Running.
	progress("timing the local provider alone")
	providerTimes, err := providerStarts(ctx, filepath.Join(dir, "forward-proxy"), filepath.Join(dir, "provider-only"))
	if err != nil {
		return "", fmt.Errorf("phase \"provider alone\": %w", err)
	}

	progress("starting kube-apiserver and etcd")
	env, kubeconfig, err := benchkit.StartAPIServer(ctx, dir)
	if err != nil {
		return "", err
	}
	defer env.Stop()
	kube, crawl := kubernetes.NewForConfigOrDie(env.Config), versioned.NewForConfigOrDie(env.Config)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer target.Close()

	ns := "autoscale-bench"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	stateDir := filepath.Join(dir, "instances")
	op, err := benchkit.StartOperator(filepath.Join(dir, "proxy-operator"), filepath.Join(dir, "operator.log"),
		"--kubeconfig="+kubeconfig, "--namespace="+ns, "--leader-elect-namespace="+ns, "--providers=local",
		"--local-state-dir="+stateDir, "--lease-auth=none")
	if err != nil {
		return "", err
	}
	defer func() {
		op.Kill()
		benchkit.KillLocalInstances(stateDir)
	}()

	p := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: crawlv1alpha1.ProxyPoolSpec{
		Replicas: ptr.To[int32](0),
		Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal,
			HealthCheck: crawlv1alpha1.HealthCheck{URL: target.URL + "/generate_204", Interval: &metav1.Duration{Duration: probeInterval},
				Timeout: &metav1.Duration{Duration: 900 * time.Millisecond}}}},
		DrainTimeout: &metav1.Duration{Duration: 0},
		Autoscaling: &crawlv1alpha1.PoolAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 4, TargetUtilization: ptr.To[int32](100),
			ScaleDownDelay: &metav1.Duration{Duration: 3 * time.Second}},
	}}
	if _, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	lc, err := client.New("http://" + op.Addr(1))
	if err != nil {
		return "", err
	}
	var firstLease []time.Duration
	for round := range rounds {
		progress("round %d: waiting for the pool at zero members, autoscaler measuring", round+1)
		if err := waitFor(ctx, 3*time.Minute, func() (bool, error) {
			p, err := crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, "bench", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling)
			return len(list.Items) == 0 && ptr.Deref(p.Spec.Replicas, -1) == 0 && c != nil && c.Status == metav1.ConditionTrue, nil
		}); err != nil {
			return "", fmt.Errorf("phase \"empty pool\", round %d: %w", round+1, err)
		}
		start := time.Now()
		l, err := lc.Acquire(ctx, client.AcquireRequest{Holder: "bench", Namespace: ns, Selector: crawlv1alpha1.PoolLabel + "=bench", TTL: time.Minute, Wait: 60 * time.Second})
		if err != nil {
			return "", fmt.Errorf("phase \"first acquire\", round %d: %w", round+1, err)
		}
		firstLease = append(firstLease, time.Since(start))
		progress("round %d: 201 after %v", round+1, firstLease[len(firstLease)-1].Round(time.Millisecond))
		if err := lc.Release(ctx, l.ID, client.OutcomeOK, ""); err != nil {
			return "", err
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "| scale from zero (local provider, %d rounds) | median | min | max |\n|---|---|---|---|\n", rounds)
	row := func(name string, ds []time.Duration) {
		s := slices.Clone(ds)
		slices.Sort(s)
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s | %.2f s |\n", name, s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
	}
	row("first acquire (wait 60s) on an empty pool → 201", firstLease)
	row("reference: the local provider alone, Create → Running", providerTimes)
	fmt.Fprintf(&b, "| reference: probe interval (a member is Ready after its first probe; a new proxy is probed at the engine's next tick, docs/decisions/0121-proxy-created-while-engine-runs-probed.md, and both are 1 s here) | %.2f s | | |\n", probeInterval.Seconds())
	s := slices.Clone(providerTimes)
	slices.Sort(s)
	fmt.Fprintf(&b, "| floor bound: provider start + one probe interval (the most the first probe waits) | %.2f s | | |\n", (s[len(s)/2] + probeInterval).Seconds())
	return b.String(), nil
}

// providerStarts times the local provider alone: Create to a Running instance.
func providerStarts(ctx context.Context, binary, stateDir string) ([]time.Duration, error) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data: map[string][]byte{"username": []byte("bench"), "password": []byte("bench-password")}}
	p, err := local.New(local.Options{StateDir: stateDir, Binary: binary,
		Secrets: func(context.Context, string, string) (*corev1.Secret, error) { return secret, nil }})
	if err != nil {
		return nil, err
	}
	defer benchkit.KillLocalInstances(stateDir)
	var out []time.Duration
	for i := range rounds {
		proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("alone-%d", i), Namespace: "bench",
			UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", i))},
			Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}}
		name := provider.InstanceName(proxy.UID)
		start := time.Now()
		inst, err := p.Create(ctx, provider.CreateRequest{Name: name, Proxy: proxy, Tags: provider.Tags(proxy)})
		for err == nil && inst.State != provider.StateRunning {
			time.Sleep(10 * time.Millisecond)
			inst, err = p.Get(ctx, inst.ID)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
		if err := p.Delete(ctx, inst.ID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// simulate runs a bursty day through pool.Autoscale.
func simulate() string {
	const (
		step    = 5 * time.Second
		day     = 24 * time.Hour
		startUp = 45 * time.Second // a cloud VM's boot and first probe, roughly
	)
	trace := burstyTrace(day, step)
	peak := slices.Max(trace)
	pol := pool.AutoscalePolicy{Min: 0, Max: 250, TargetPercent: 80, SlotsPerMember: 1, ScaleDownDelay: 5 * time.Minute,
		ScaleUpMaxStep: 4, ScaleUpPercent: 100, ScaleUpPeriod: 15 * time.Second}

	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var h pool.AutoscaleHistory
	replicas := 0
	var ready []time.Time // when each member is Ready (existing members)
	var memberSeconds, waitSeconds float64
	for i, workers := range trace {
		now := t0.Add(time.Duration(i) * step)
		readyNow := 0
		for _, r := range ready {
			if !now.Before(r) {
				readyNow++
			}
		}
		held := min(workers, readyNow)
		d := pool.Demand{Held: held, Waiting: workers - held}
		var dec pool.AutoscaleDecision
		dec, h = pool.Autoscale(pol, replicas, d, h, now)
		replicas = dec.Desired
		for len(ready) < replicas {
			ready = append(ready, now.Add(startUp))
		}
		// Scale-down takes the members that are not Ready yet first, then
		// any (the trace's workers leave as demand falls, so none is leased).
		slices.SortFunc(ready, func(a, b time.Time) int { return b.Compare(a) })
		if len(ready) > replicas {
			ready = ready[len(ready)-replicas:]
		}
		memberSeconds += float64(len(ready)) * step.Seconds()
		waitSeconds += float64(workers-held) * step.Seconds()
	}
	fixedHours := float64(peak) * day.Hours()
	var workerSeconds float64
	for _, w := range trace {
		workerSeconds += float64(w) * step.Seconds()
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Simulated (pool.Autoscale, the operator's own decision function, called every %v; members Ready %v after creation; no API server): a day of bursty crawl jobs, peak %d workers at once, %.0f worker-hours in all.\n\n",
		step, startUp, peak, workerSeconds/3600)
	b.WriteString("| pool | proxy-hours | vs fixed at peak | worker-hours waiting for a member |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| fixed at the peak (%d members) | %.0f | 1.00 | 0 |\n", peak, fixedHours)
	fmt.Fprintf(&b, "| autoscaled: min 0, max 250, target 80%%, scaleDownDelay 5m, scale-up 4 or 100%% per 15s | %.0f | %.2f | %.2f |\n",
		memberSeconds/3600, memberSeconds/3600/fixedHours, waitSeconds/3600)
	return b.String()
}

// burstyTrace is the workers wanting a proxy at each step of a day: a
// trickle of 0–2 overnight, and crawl jobs arriving at random (more by
// day), each 10–90 minutes long with 5–40 workers. The seed is fixed, so
// every run simulates the same day.
func burstyTrace(day, step time.Duration) []int {
	rng := rand.New(rand.NewPCG(15, 2026))
	n := int(day / step)
	trace := make([]int, n)
	for i := range trace {
		trace[i] = rng.IntN(3) / 2 // mostly 0, sometimes 1
	}
	for job := 0; job < 40; job++ {
		hour := rng.IntN(24)
		if hour < 7 && rng.IntN(2) == 0 {
			hour += 9 // fewer jobs at night
		}
		start := int(time.Duration(hour)*time.Hour/step) + rng.IntN(int(time.Hour/step))
		length := int((10*time.Minute + time.Duration(rng.IntN(80))*time.Minute) / step)
		workers := 5 + rng.IntN(36)
		for i := start; i < min(n, start+length); i++ {
			trace[i] += workers
		}
	}
	return trace
}

func waitFor(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := check()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v (last error %v)", timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
