// Command bench measures a Secret rotation (issue 13) on the real operator
// binary, a real kube-apiserver and etcd (pkg/testing/testenv) and the local
// provider's forward-proxy processes: six ProxyPool members sharing a
// cloud-init Secret (maxSurge 1, maxUnavailable 1) beside six standalone
// Proxies sharing another, both rotated in the same run. For each it
// reports the minimum Ready count sampled every 100 ms during the rotation
// and the time until all six are Ready on the new content.
//
//	go run ./pkg/testsuites/bench/pool
//
// It prints markdown on stdout and progress on stderr. It is a measurement,
// not a test: it asserts nothing, but fails naming the phase that did not
// finish.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

const size = 6

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool bench:", err)
		os.Exit(1)
	}
	fmt.Print(report)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s pool bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// result is one rotation's figures.
type result struct {
	minReady  int
	samples   int
	converged time.Duration
}

func run(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "pool-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	progress("building cmd/proxy-operator and cmd/forward-proxy")
	if err := benchkit.Build(ctx, dir, "proxy-operator", "forward-proxy"); err != nil {
		return "", err
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

	ns := "pool-bench"
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

	health := crawlv1alpha1.HealthCheck{URL: target.URL + "/generate_204", Interval: &metav1.Duration{Duration: time.Second},
		Timeout: &metav1.Duration{Duration: 900 * time.Millisecond}}
	for _, name := range []string{"pool-ci", "standalone-ci"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"user-data": "#cloud-config\n# v1\n"}}
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return "", err
		}
	}
	spec := func(secret string) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, HealthCheck: health,
			CloudInit: &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: secret, Key: "user-data"}}}
	}
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: crawlv1alpha1.ProxyPoolSpec{
		Replicas: ptr.To[int32](size), Template: crawlv1alpha1.ProxyTemplate{Spec: spec("pool-ci")},
		Strategy: crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(1))},
	}}
	if _, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	for i := range size {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("standalone-%d", i), Labels: map[string]string{"group": "standalone"}}, Spec: spec("standalone-ci")}
		if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return "", err
		}
	}
	poolSel, standaloneSel := crawlv1alpha1.PoolLabel+"=bench", "group=standalone"
	progress("waiting for 6 pool members and 6 standalone Proxies to be Ready")
	if err := waitFor(ctx, 5*time.Minute, func() (bool, error) {
		a, err := readyCount(ctx, crawl, ns, poolSel)
		if err != nil {
			return false, err
		}
		b, err := readyCount(ctx, crawl, ns, standaloneSel)
		return a.ready == size && a.total == size && b.ready == size, err
	}); err != nil {
		return "", fmt.Errorf("phase \"all Ready\": %w", err)
	}
	hashesBefore, err := hashes(ctx, crawl, ns, standaloneSel)
	if err != nil {
		return "", err
	}
	poolBefore, err := crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, "bench", metav1.GetOptions{})
	if err != nil {
		return "", err
	}

	// Both Secrets rotated at once; each side sampled by its own loop.
	progress("rotating both Secrets")
	start := time.Now()
	for _, name := range []string{"pool-ci", "standalone-ci"} {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		s.Data, s.StringData = nil, map[string]string{"user-data": "#cloud-config\n# v2\n"}
		if _, err := kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return "", err
		}
	}
	type outcome struct {
		r   result
		err error
	}
	poolDone, standaloneDone := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		r, err := sampleUntil(ctx, start, crawl, ns, poolSel, func(ctx context.Context) (bool, error) {
			p, err := crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, "bench", metav1.GetOptions{})
			if err != nil || p.Status.Revision == poolBefore.Status.Revision {
				return false, err
			}
			list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{LabelSelector: poolSel})
			if err != nil {
				return false, err
			}
			up := 0
			for _, m := range list.Items {
				if m.Labels[crawlv1alpha1.PoolRevisionLabel] == p.Status.Revision && m.Status.Phase == crawlv1alpha1.PhaseReady && m.DeletionTimestamp == nil {
					up++
				}
			}
			return up == size && len(list.Items) == size, nil
		})
		poolDone <- outcome{r, err}
	}()
	go func() {
		r, err := sampleUntil(ctx, start, crawl, ns, standaloneSel, func(ctx context.Context) (bool, error) {
			now, err := hashes(ctx, crawl, ns, standaloneSel)
			if err != nil {
				return false, err
			}
			c, err := readyCount(ctx, crawl, ns, standaloneSel)
			if err != nil {
				return false, err
			}
			for name, h := range now {
				if h == hashesBefore[name] {
					return false, nil
				}
			}
			return c.ready == size, nil
		})
		standaloneDone <- outcome{r, err}
	}()
	p, s := <-poolDone, <-standaloneDone
	if err := errors.Join(p.err, s.err); err != nil {
		return "", fmt.Errorf("phase \"rotation\": %w", err)
	}
	progress("pool: min Ready %d, %v; standalone: min Ready %d, %v", p.r.minReady, p.r.converged, s.r.minReady, s.r.converged)

	out := "| 6 proxies sharing a cloud-init Secret, Secret rotated | minimum Ready during the rotation | time to all 6 Ready on the new content | samples (every 100 ms) |\n|---|---|---|---|\n"
	out += fmt.Sprintf("| ProxyPool, maxSurge 1, maxUnavailable 1 | %d of 6 | %.1f s | %d |\n", p.r.minReady, p.r.converged.Seconds(), p.r.samples)
	out += fmt.Sprintf("| standalone Proxies (reference) | %d of 6 | %.1f s | %d |\n", s.r.minReady, s.r.converged.Seconds(), s.r.samples)
	return out, nil
}

type counts struct{ ready, total int }

func readyCount(ctx context.Context, crawl versioned.Interface, ns, sel string) (counts, error) {
	list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return counts{}, err
	}
	c := counts{total: len(list.Items)}
	for _, p := range list.Items {
		if p.Status.Phase == crawlv1alpha1.PhaseReady && p.DeletionTimestamp == nil {
			c.ready++
		}
	}
	return c, nil
}

func hashes(ctx context.Context, crawl versioned.Interface, ns, sel string) (map[string]string, error) {
	list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Name] = p.Annotations[crawlv1alpha1.SpecHashAnnotation]
	}
	return out, nil
}

// sampleUntil counts Ready proxies every 100 ms until done says so.
func sampleUntil(ctx context.Context, start time.Time, crawl versioned.Interface, ns, sel string, done func(context.Context) (bool, error)) (result, error) {
	r := result{minReady: size}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%s: not converged: %w", sel, ctx.Err())
		case <-tick.C:
		}
		c, err := readyCount(ctx, crawl, ns, sel)
		if err != nil {
			continue
		}
		r.samples++
		r.minReady = min(r.minReady, c.ready)
		if ok, err := done(ctx); err == nil && ok {
			r.converged = time.Since(start)
			return r, nil
		}
	}
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
		case <-time.After(200 * time.Millisecond):
		}
	}
}
