package chaos_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// watchExpiredLine is what client-go's reflector logs (at -v=4) when a
// watch comes back with 410 Gone and the informer lists again.
const watchExpiredLine = `"Watch closed"`

// TestWatchExpiryStorm (issue 37): the operator is cut off from the API
// server by a packet filter while the fleet changes under it (creates,
// endpoint edits, deletes, and objects created and deleted that it never
// sees); etcd is compacted past every revision it knows and the API server
// restarted, so that its watch cache starts after them. When the filter
// goes, every watch the operator resumes expires at once. It must list
// again and converge on what was asked: nothing lost, no instance leaked or
// duplicated, and nothing that did not change replaced or flipped.
func TestWatchExpiryStorm(t *testing.T) {
	f, stateDir := newFleet(t)
	partition := operatortest.NewAPIPartition(t, shared.Get(t).Env)
	// The partition and the restart together outlast the default renew
	// deadline; a leader that cannot renew exits by design
	// (TestLostLeaseExits). What is tested here is the informers' recovery.
	op := startOperatorVia(t, partition.Kubeconfig, "operator", f.ns, "-v=4", "--providers=local", "--local-state-dir="+stateDir,
		"--leader-elect-lease-duration=2m", "--leader-elect-renew-deadline=90s")

	f.apply(fleetChange{createExternal: integration.Scaled(20, 100), createManaged: 3})
	f.waitConverged(stateDir, 2*time.Minute)
	before := f.histories()

	partition.Cut()
	began := time.Now()
	f.apply(fleetChange{createExternal: 10, createManaged: 2, moveExternal: 5, deleteExternal: 3, deleteManaged: 1})
	f.createAndDelete()
	// The partition is real: what was created behind it stays untouched.
	time.Sleep(2 * time.Second)
	if seen := f.statusWritten(began); len(seen) > 0 {
		t.Fatalf("the operator wrote the status of %v while cut off", seen)
	}
	_, logCtx := ktesting.NewTestContext(t)
	revision, err := shared.Get(t).Env.CompactEtcd(logCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.Get(t).Env.RestartAPIServer(logCtx); err != nil {
		t.Fatal(err)
	}
	partition.Heal()
	t.Logf("partitioned %v: fleet changed, etcd compacted to revision %d, kube-apiserver restarted", time.Since(began).Round(100*time.Millisecond), revision)

	f.waitConverged(stateDir, 2*time.Minute)
	t.Logf("converged %v after the cut", time.Since(began).Round(100*time.Millisecond))
	if !op.Running() {
		t.Fatalf("the operator exited: %s", op.Exit())
	}
	if n := strings.Count(op.Logs(), watchExpiredLine); n == 0 {
		t.Errorf("the operator's log has no %s: no watch expired, so the test showed nothing", watchExpiredLine)
	} else {
		t.Logf("%d watches expired and were listed again", n)
	}
	after := f.histories()
	for name, was := range before {
		now, ok := after[name]
		if ok && now.endpoint == was.endpoint && now != was {
			t.Errorf("%s did not change, but its history did: %+v, then %+v", name, was, now)
		}
	}
}

// history is what changes when a Proxy is replaced or its verdict flips.
type history struct {
	endpoint, providerID string
	// The last transitions of its Provisioned and Healthy conditions.
	provisioned, healthy time.Time
}

// histories reads the history of every wanted Proxy.
func (f *fleet) histories() map[string]history {
	f.t.Helper()
	_, crawl := clients(f.t)
	list, err := crawl.CrawlV1alpha1().Proxies(f.ns).List(f.t.Context(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	transition := func(p *crawlv1alpha1.Proxy, condition string) time.Time {
		if c := apimeta.FindStatusCondition(p.Status.Conditions, condition); c != nil {
			return c.LastTransitionTime.Time
		}
		return time.Time{}
	}
	out := map[string]history{}
	for i := range list.Items {
		p := &list.Items[i]
		out[p.Name] = history{
			endpoint:    f.want[p.Name],
			providerID:  p.Status.ProviderID,
			provisioned: transition(p, "Provisioned"),
			healthy:     transition(p, "Healthy"),
		}
	}
	return out
}

// statusWritten names the Proxies created since began that have a status.
func (f *fleet) statusWritten(began time.Time) []string {
	f.t.Helper()
	_, crawl := clients(f.t)
	list, err := crawl.CrawlV1alpha1().Proxies(f.ns).List(f.t.Context(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		if !p.CreationTimestamp.Time.Before(began.Truncate(time.Second)) && p.Status.Phase != "" {
			out = append(out, p.Name)
		}
	}
	return out
}

// createAndDelete creates an External and a Managed Proxy and deletes them
// at once: an operator that is cut off never sees either.
func (f *fleet) createAndDelete() {
	f.t.Helper()
	_, crawl := clients(f.t)
	proxies := crawl.CrawlV1alpha1().Proxies(f.ns)
	host, port := splitHostPort(f.t, f.upstreams[0])
	for _, p := range []*crawlv1alpha1.Proxy{
		{ObjectMeta: metav1.ObjectMeta{Name: "unseen-external"}, Spec: crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: port}, HealthCheck: fastHealthCheck(f.target),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "unseen-managed"}, Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderLocal, HealthCheck: fastHealthCheck(f.target),
		}},
	} {
		ctx, cancel := context.WithTimeout(f.t.Context(), 30*time.Second)
		if _, err := proxies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
		if err := proxies.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			f.t.Fatal(fmt.Errorf("deleting %s: %w", p.Name, err))
		}
		cancel()
	}
}
