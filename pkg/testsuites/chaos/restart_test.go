package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// fleetChange is what one round of TestAPIServerRestartMidFlow does to the
// fleet just before the API server goes down.
type fleetChange struct {
	createExternal, createManaged int
	moveExternal                  int // edits of spec.endpoint
	deleteExternal, deleteManaged int
}

// TestAPIServerRestartMidFlow: the fleet changes (creates, endpoint edits,
// deletes of External and Managed Proxies) and kube-apiserver is restarted
// right after each change, while the operator is working through it. The
// operator process keeps running, its informers recover, and the fleet
// converges to exactly what
// was asked: every Proxy Ready at its current generation and endpoint, the
// deleted ones gone with their instances, one local instance per Managed
// Proxy and no other.
func TestAPIServerRestartMidFlow(t *testing.T) {
	f, stateDir := newFleet(t)
	// A renew deadline above any restart: on a loaded 2-core machine a
	// restart has taken 10.3 s, as long as the default deadline, and a
	// leader that cannot renew in time exits by design (TestLostLeaseExits
	// shows the exit). What is tested here is everything else riding out
	// the outage.
	op := startOperator(t, "operator", f.ns, "--providers=local", "--local-state-dir="+stateDir,
		"--leader-elect-lease-duration=45s", "--leader-elect-renew-deadline=30s")

	rounds := []fleetChange{
		{createExternal: 20, createManaged: 3},
		{createExternal: 5, moveExternal: 5, deleteExternal: 5, deleteManaged: 1, createManaged: 1},
	}
	for range integration.Scaled(0, 4) {
		rounds = append(rounds, fleetChange{createExternal: 5, moveExternal: 5, deleteExternal: 3, deleteManaged: 1, createManaged: 1})
	}

	_, logCtx := ktesting.NewTestContext(t)
	for i, change := range rounds {
		f.apply(change)
		began := time.Now()
		if err := shared.Get(t).Env.RestartAPIServer(logCtx); err != nil {
			t.Fatalf("round %d: %v", i+1, err)
		}
		t.Logf("round %d: %+v, then kube-apiserver restarted in %v", i+1, change, time.Since(began).Round(time.Millisecond))
		if !op.Running() {
			t.Fatalf("round %d: the operator did not survive the restart: %s", i+1, op.Exit())
		}
	}

	f.waitConverged(stateDir, 2*time.Minute)
	if !op.Running() {
		t.Fatalf("the operator exited: %s", op.Exit())
	}
	t.Logf("converged: %d Proxies (%d Managed) after %d restarts of kube-apiserver, one operator process throughout; %d unrecorded instances found at deletion",
		len(f.want), f.managedCount(), len(rounds), strings.Count(op.Logs(), "Found an instance the status did not record"))
}

// managedEndpoint marks a Managed Proxy in fleet.want.
const managedEndpoint = "managed"

// fleet is the Proxies TestAPIServerRestartMidFlow asked for.
type fleet struct {
	t         *testing.T
	ns        string
	target    string
	upstreams []string
	// want maps every Proxy that should exist to its endpoint
	// (managedEndpoint for Managed ones).
	want map[string]string
	next int
}

func (f *fleet) apply(c fleetChange) {
	f.t.Helper()
	_, crawl := clients(f.t)
	proxies := crawl.CrawlV1alpha1().Proxies(f.ns)
	ctx := f.t.Context()
	external, managed := f.names()
	for _, name := range external[:c.moveExternal] {
		endpoint := f.upstreams[(slices.Index(f.upstreams, f.want[name])+1)%len(f.upstreams)]
		host, port := splitHostPort(f.t, endpoint)
		updateProxy(f.t, f.ns, name, func(p *crawlv1alpha1.Proxy) { p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: host, Port: port} })
		f.want[name] = endpoint
	}
	// Delete the newest: moved Proxies stay to be checked, and a Managed
	// Proxy created just before the last restart may have an instance its
	// status does not record yet.
	deletes := append(external[len(external)-c.deleteExternal:], managed[len(managed)-c.deleteManaged:]...)
	for _, name := range deletes {
		if err := proxies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			f.t.Fatal(err)
		}
		delete(f.want, name)
	}
	for range c.createExternal {
		f.next++
		name, endpoint := fmt.Sprintf("ext-%03d", f.next), f.upstreams[f.next%len(f.upstreams)]
		host, port := splitHostPort(f.t, endpoint)
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: crawlv1alpha1.ProxySpec{
				Mode:        crawlv1alpha1.ModeExternal,
				Endpoint:    &crawlv1alpha1.Endpoint{Host: host, Port: port},
				HealthCheck: fastHealthCheck(f.target),
			},
		}
		if _, err := proxies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
		f.want[name] = endpoint
	}
	for range c.createManaged {
		f.next++
		name := fmt.Sprintf("managed-%03d", f.next)
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, HealthCheck: fastHealthCheck(f.target)},
		}
		if _, err := proxies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
		f.want[name] = managedEndpoint
	}
}

// waitConverged waits until the Proxies are exactly f.want, each Ready at its
// generation and endpoint, with one local instance (in stateDir) and one
// forward-proxy process per Managed Proxy and no other.
func (f *fleet) waitConverged(stateDir string, within time.Duration) {
	f.t.Helper()
	_, crawl := clients(f.t)
	eventually.Check(f.t, within, 250*time.Millisecond, "the fleet converged", func(ctx context.Context) error {
		list, err := crawl.CrawlV1alpha1().Proxies(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var problems []string
		seen := map[string]bool{}
		for _, p := range list.Items {
			seen[p.Name] = true
			if problem := f.check(&p); problem != "" {
				problems = append(problems, problem)
			}
		}
		for name := range f.want {
			if !seen[name] {
				problems = append(problems, name+": missing")
			}
		}
		managed := f.managedCount()
		if n := len(localInstances(f.t, stateDir)); n != managed {
			problems = append(problems, fmt.Sprintf("%d local instances for %d Managed Proxies", n, managed))
		}
		if pids := forwardProxyProcesses(f.t, stateDir); len(pids) != managed {
			problems = append(problems, fmt.Sprintf("%d forward-proxy processes for %d Managed Proxies", len(pids), managed))
		}
		if len(problems) > 0 {
			slices.Sort(problems)
			return fmt.Errorf("%d problems: %s", len(problems), strings.Join(problems[:min(5, len(problems))], "; "))
		}
		return nil
	})
}

// newFleet makes an empty fleet in a new namespace: a target for the health
// checks, three real forward proxies for External Proxies to point at (an
// endpoint edit moves a Proxy to the next one), and a state directory for
// the local provider's instances, which are killed when the test ends.
func newFleet(t *testing.T) (f *fleet, stateDir string) {
	t.Helper()
	f = &fleet{t: t, ns: newNamespace(t), target: proxytest.StartHTTPTarget(t).URL, want: map[string]string{}}
	stateDir = t.TempDir()
	t.Cleanup(func() { killForwardProxies(t, stateDir) })
	for range 3 {
		f.upstreams = append(f.upstreams, proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1}).Addr)
	}
	return f, stateDir
}

// names lists the wanted External and Managed Proxies, sorted.
func (f *fleet) names() (external, managed []string) {
	for name, endpoint := range f.want {
		if endpoint == managedEndpoint {
			managed = append(managed, name)
		} else {
			external = append(external, name)
		}
	}
	slices.Sort(external)
	slices.Sort(managed)
	return external, managed
}

func (f *fleet) managedCount() int {
	_, managed := f.names()
	return len(managed)
}

// check says what is wrong with p ("" if nothing).
func (f *fleet) check(p *crawlv1alpha1.Proxy) string {
	endpoint, ok := f.want[p.Name]
	switch {
	case !ok:
		return p.Name + ": deleted but still there"
	case p.Status.Phase != crawlv1alpha1.PhaseReady || p.Status.ObservedGeneration != p.Generation:
		return fmt.Sprintf("%s: phase %q at generation %d of %d", p.Name, p.Status.Phase, p.Status.ObservedGeneration, p.Generation)
	case endpoint == managedEndpoint && !strings.HasPrefix(p.Status.ProviderID, "local://"):
		return fmt.Sprintf("%s: providerID %q", p.Name, p.Status.ProviderID)
	case endpoint != managedEndpoint && fmt.Sprintf("%s:%d", p.Status.IP, p.Status.Port) != endpoint:
		return fmt.Sprintf("%s: status address %s:%d, want %s", p.Name, p.Status.IP, p.Status.Port, endpoint)
	}
	return ""
}

func splitHostPort(t *testing.T, addr string) (string, int32) {
	t.Helper()
	host, port, ok := strings.Cut(addr, ":")
	var n int32
	if _, err := fmt.Sscan(port, &n); !ok || err != nil {
		t.Fatalf("bad address %q", addr)
	}
	return host, n
}
