package poolintegration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// autoscaled gives a pool spec.autoscaling.
func autoscaled(a crawlv1alpha1.PoolAutoscaling) func(*crawlv1alpha1.ProxyPool) {
	return func(p *crawlv1alpha1.ProxyPool) { p.Spec.Autoscaling = &a }
}

// autoscaledEvents lists the pool's Autoscaled events (kubectl describe's story).
func (pt *poolTest) autoscaledEvents(ctx context.Context, pool string) ([]string, error) {
	list, err := pt.kube.CoreV1().Events(pt.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "ProxyPool", "involvedObject.name": pool, "reason": "Autoscaled"}.String()})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out, nil
}

// TestScaleFromZero: a pool with minReplicas 0 and maxReplicas 4 sits at
// zero members; three acquires that wait 60 s (by the pool's label, by the
// template's label, and by namespace alone: each would match a member) scale
// it up and are all granted within their wait, on three different members;
// the pool is at 3. Released, the pool goes back to zero members once
// scaleDownDelay has passed (saying ScaleDownDelayed meanwhile), with no
// instance left.
//
// targetUtilization is 100 here, so that three slots wanted is three
// members; at the default 80 the same demand asks for ceil(3/0.8) = 4.
func TestScaleFromZero(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("zero", 0, target.URL, autoscaled(crawlv1alpha1.PoolAutoscaling{
		MinReplicas: ptr.To[int32](0), MaxReplicas: 4, TargetUtilization: ptr.To[int32](100),
		ScaleDownDelay: &metav1.Duration{Duration: 20 * time.Second},
	})))
	eventually.Check(t, time.Minute, interval, "the autoscaler measuring an idle pool at zero", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "zero")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling)
		if c == nil || c.Status != metav1.ConditionTrue || p.Status.Demand == nil || ptr.Deref(p.Status.Demand.DesiredReplicas, -1) != 0 {
			return fmt.Errorf("condition %+v, demand %+v", c, p.Status.Demand)
		}
		if ms, err := pt.members(ctx, "zero"); err != nil || len(ms) != 0 {
			return fmt.Errorf("%d members (%v)", len(ms), err)
		}
		return nil
	})

	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	s := pt.sample("zero")
	selectors := []string{crawlv1alpha1.PoolLabel + "=zero", "team=crawl", ""}
	leases := make([]*client.Lease, len(selectors))
	errs := make([]error, len(selectors))
	var wg sync.WaitGroup
	for i, sel := range selectors {
		wg.Go(func() {
			leases[i], errs[i] = lc.Acquire(t.Context(), client.AcquireRequest{
				Holder: fmt.Sprintf("crawler-%d", i), Namespace: pt.ns, Selector: sel, TTL: time.Minute, Wait: 60 * time.Second})
		})
	}
	wg.Wait()
	s.finish()
	proxies := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire %d (selector %q) on the empty pool: %v", i, selectors[i], err)
		}
		proxies[leases[i].Proxy.Name] = true
	}
	if len(proxies) != 3 {
		t.Errorf("the three leases hold %d proxies (%v), want three members", len(proxies), proxies)
	}
	if s.maxMembers > 3 {
		t.Errorf("%d members existed at once for three waiting acquires at targetUtilization 100", s.maxMembers)
	}
	p, err := pt.pool(t.Context(), "zero")
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(p.Spec.Replicas, -1); got != 3 {
		t.Errorf("spec.replicas %d with three leases held, want 3", got)
	}
	eventually.Check(t, 30*time.Second, interval, "status showing 3 held", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "zero")
		if err != nil || p.Status.Demand == nil || p.Status.Demand.Held != 3 || p.Status.ReadyReplicas != 3 {
			return fmt.Errorf("status %+v (%v)", p.Status, err)
		}
		return nil
	})
	if events, err := pt.autoscaledEvents(t.Context(), "zero"); err != nil || len(events) == 0 {
		t.Errorf("no Autoscaled event on the pool (%v)", err)
	} else {
		t.Logf("events: %q", events)
	}

	for i, l := range leases {
		if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	sawDelay := false
	eventually.Check(t, 2*time.Minute, interval, "back to zero members after scaleDownDelay", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "zero")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling); c != nil && c.Reason == "ScaleDownDelayed" {
			sawDelay = true
		}
		ms, err := pt.members(ctx, "zero")
		if err != nil {
			return err
		}
		if ptr.Deref(p.Spec.Replicas, -1) != 0 || len(ms) != 0 {
			return fmt.Errorf("spec.replicas %d, %d members", ptr.Deref(p.Spec.Replicas, -1), len(ms))
		}
		return nil
	})
	if !sawDelay {
		t.Errorf("the pool never said ScaleDownDelayed between the releases and the scale-down")
	}
	eventually.Check(t, 30*time.Second, interval, "no instance left", func(ctx context.Context) error {
		if err := pt.noLeak(ctx, "zero"); err != nil {
			return err
		}
		if n := len(pt.instances()); n > 0 {
			return fmt.Errorf("%d instances", n)
		}
		return nil
	})
}

// TestSteadyDemandSettles: eight workers hold leases (maxLeases 1) on a pool
// with targetUtilization 80; the pool grows, within its scale-up bound, to
// ceil(8/0.8) = 10 members and stays there: over the next two minutes
// spec.replicas and the pool's generation do not move, no Autoscaled event
// is added, and every worker keeps its lease.
func TestSteadyDemandSettles(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("steady", 1, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.MaxLeases = 1
	}, autoscaled(crawlv1alpha1.PoolAutoscaling{
		MinReplicas: ptr.To[int32](1), MaxReplicas: 20, TargetUtilization: ptr.To[int32](80),
		ScaleDownDelay: &metav1.Duration{Duration: time.Minute},
	})))
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}

	const workers = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	holding, acquired := map[int]string{}, 0
	var workerErrs []error
	var watching atomic.Bool
	for i := range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := lc.Hold(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("worker-%d", i), Namespace: pt.ns,
					Selector: crawlv1alpha1.PoolLabel + "=steady", TTL: 30 * time.Second, Wait: 60 * time.Second},
					func(ctx context.Context, l client.Lease) error {
						mu.Lock()
						holding[i] = l.Proxy.Name
						acquired++
						mu.Unlock()
						select {
						case <-stop:
						case <-ctx.Done():
						}
						mu.Lock()
						delete(holding, i)
						mu.Unlock()
						return nil
					})
				// Before the pool has grown, a wait may run out: that is the
				// demand the autoscaler answers, not a failure.
				if err != nil && t.Context().Err() == nil && watching.Load() {
					mu.Lock()
					workerErrs = append(workerErrs, fmt.Errorf("worker %d: %w", i, err))
					mu.Unlock()
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	eventually.Check(t, 4*time.Minute, interval, "8 leases held on a pool of 10 Ready members", func(ctx context.Context) error {
		mu.Lock()
		n := len(holding)
		mu.Unlock()
		p, err := pt.pool(ctx, "steady")
		if err != nil {
			return err
		}
		if n != workers || ptr.Deref(p.Spec.Replicas, -1) != 10 {
			return fmt.Errorf("%d workers holding, spec.replicas %d, demand %+v", n, ptr.Deref(p.Spec.Replicas, -1), p.Status.Demand)
		}
		return pt.settled(ctx, "steady", 10)
	})
	settled, err := pt.pool(t.Context(), "steady")
	if err != nil {
		t.Fatal(err)
	}
	eventsBefore, err := pt.autoscaledEvents(t.Context(), "steady")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	acquiredBefore := acquired
	mu.Unlock()
	watching.Store(true)
	t.Logf("settled at 10 (generation %d) after %d Autoscaled events: %q", settled.Generation, len(eventsBefore), eventsBefore)

	// The hold window: two minutes of the same demand, looked at every second.
	var changes []string
	samples := 0
	end := time.Now().Add(2 * time.Minute)
	for time.Now().Before(end) {
		pollUntil(t, time.Second)
		p, err := pt.pool(t.Context(), "steady")
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if r := ptr.Deref(p.Spec.Replicas, -1); r != 10 || p.Generation != settled.Generation {
			changes = append(changes, fmt.Sprintf("spec.replicas %d generation %d (%s)", r, p.Generation, conditionReason(p)))
		}
	}
	if len(changes) > 0 {
		t.Errorf("the pool moved during the hold window (%d of %d samples): %v", len(changes), samples, changes)
	}
	eventsAfter, err := pt.autoscaledEvents(t.Context(), "steady")
	if err != nil {
		t.Fatal(err)
	}
	if len(eventsAfter) != len(eventsBefore) {
		t.Errorf("Autoscaled events during the hold window: %q", eventsAfter[len(eventsBefore):])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(holding) != workers || acquired != acquiredBefore {
		t.Errorf("%d workers holding, %d acquires during the window: leases were lost", len(holding), acquired-acquiredBefore)
	}
	if len(workerErrs) > 0 {
		t.Errorf("workers failed: %v", errors.Join(workerErrs...))
	}
	ms, err := pt.members(t.Context(), "steady")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 10 || ready(ms) != 10 {
		t.Errorf("%d members, %d Ready at the end of the window, want 10", len(ms), ready(ms))
	}

	// kubectl tells the story: get -o wide shows the demand beside the size,
	// describe the condition and the events.
	eventually.Check(t, 30*time.Second, interval, "kubectl get pxp -o wide: Desired 10, Held 8, Waiting 0, Wanted 10", func(ctx context.Context) error {
		cols, err := pt.kubectlWide(ctx, "steady")
		if err != nil {
			return err
		}
		want := map[string]string{"DESIRED": "10", "READY": "10", "HELD": "8", "WAITING": "0", "WANTED": "10"}
		for k, v := range want {
			if cols[k] != v {
				return fmt.Errorf("column %s is %q, want %q (all: %v)", k, cols[k], v, cols)
			}
		}
		return nil
	})
	describe, err := pt.kubectl(t.Context(), "describe", "pxp", "steady")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Autoscaling", "Stable", "8 slots held", "Autoscaled", "to 10 ("} {
		if !strings.Contains(describe, want) {
			t.Errorf("kubectl describe pxp steady lacks %q:\n%s", want, describe)
		}
	}
}

// kubectl runs the real kubectl on the test's namespace.
func (pt *poolTest) kubectl(ctx context.Context, args ...string) (string, error) {
	env := shared.Get(pt.t).Env
	kubeconfig := filepath.Join(pt.t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, env.KubectlPath(), append([]string{"--kubeconfig", kubeconfig, "-n", pt.ns}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// kubectlWide is kubectl get pxp NAME -o wide as column name → value.
func (pt *poolTest) kubectlWide(ctx context.Context, name string) (map[string]string, error) {
	out, err := pt.kubectl(ctx, "get", "pxp", name, "-o", "wide")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("kubectl get -o wide printed %q", out)
	}
	return wideColumns(lines[0], lines[1]), nil
}

// wideColumns cuts a kubectl table row at its header's column starts:
// kubectl aligns columns, and a column with no value yet (SUCCESS before any
// outcome) is blank, so splitting on spaces would shift every later value.
func wideColumns(header, row string) map[string]string {
	var starts []int
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	cols := map[string]string{}
	for n, start := range starts {
		end := len(row)
		if n+1 < len(starts) && starts[n+1] < end {
			end = starts[n+1]
		}
		name := strings.Fields(header[start:])[0]
		value := ""
		if start < len(row) {
			value = strings.TrimSpace(row[start:end])
		}
		cols[name] = value
	}
	return cols
}

func conditionReason(p *crawlv1alpha1.ProxyPool) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no Autoscaling condition"
}

// TestGatewayConnectionScalesFromZero: with --gateway-wait, curl's request
// through the gateway to a pool at zero members (the pool- term) waits, the
// pool scales up, and curl gets the target's 204 through the new member;
// once the connection is done the pool goes back to zero.
func TestGatewayConnectionScalesFromZero(t *testing.T) {
	t.Parallel()
	const curlPath = "/usr/bin/curl"
	if _, err := os.Stat(curlPath); err != nil {
		t.Fatalf("%s: %v (install the test peers: make deps)", curlPath, err)
	}
	pt := newPoolTest(t)
	gw := pt.startGateway("--gateway-wait=60s")
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("gw", 0, target.URL, autoscaled(crawlv1alpha1.PoolAutoscaling{
		MinReplicas: ptr.To[int32](0), MaxReplicas: 2, TargetUtilization: ptr.To[int32](100),
		ScaleDownDelay: &metav1.Duration{Duration: 10 * time.Second},
	})))
	eventually.Check(t, time.Minute, interval, "the autoscaler measuring an idle pool at zero", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "gw")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curlPath, "-sS", "--max-time", "80", "-o", "/dev/null", "-w", "%{http_code}",
		"-x", "http://ns-"+pt.ns+"+pool-gw:none@"+gw, target.URL+"/generate_204").CombinedOutput()
	if err != nil || string(out) != "204" {
		t.Fatalf("curl through the gateway to the empty pool: %q, %v", out, err)
	}
	p, err := pt.pool(t.Context(), "gw")
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(p.Spec.Replicas, -1); got != 1 {
		t.Errorf("spec.replicas %d after one gateway connection at targetUtilization 100, want 1", got)
	}
	eventually.Check(t, 2*time.Minute, interval, "back to zero members", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "gw")
		if err != nil || len(ms) != 0 {
			return fmt.Errorf("%d members (%v)", len(ms), err)
		}
		return pt.noLeak(ctx, "gw")
	})
}
