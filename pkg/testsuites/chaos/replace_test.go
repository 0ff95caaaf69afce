package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// shortLeaderElection lets a restarted operator take over from a killed one
// in about 3s instead of the default 15s.
var shortLeaderElection = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=500ms",
}

// replaceSnapshot is what the test sees of a replace in progress.
type replaceSnapshot struct {
	proxy     *crawlv1alpha1.Proxy
	instances []localInstance
	// oldRunning: the instance being replaced still has its process.
	oldRunning bool
}

// killPoint is a moment of a replace, recognised from outside the operator.
type killPoint struct {
	name    string
	reached func(s replaceSnapshot, old localInstance) bool
}

// The kill points, in the order a replace passes them with the local
// provider: the edit is stored; the old process is stopped (Delete is
// synchronous); the status says Replacing; the successor's process runs
// (before its providerID is written).
var killPoints = []killPoint{
	{"spec edited", func(replaceSnapshot, localInstance) bool { return true }},
	{"old process gone", func(s replaceSnapshot, _ localInstance) bool { return !s.oldRunning }},
	{"status Replacing", func(s replaceSnapshot, _ localInstance) bool {
		return conditionReason(s.proxy, crawlv1alpha1.ConditionProvisioned) == controller.ReasonReplacing
	}},
	{"successor started", func(s replaceSnapshot, old localInstance) bool {
		return slices.ContainsFunc(s.instances, func(i localInstance) bool { return i.PID != old.PID })
	}},
}

// TestOperatorKilledMidReplace: a Managed local Proxy is replaced (its spec
// changes) and the operator is killed with SIGKILL at each point of the
// replace in turn; a new operator process takes over. Every round ends with
// exactly one instance, built from the new spec, serving (the Proxy is
// Ready through a real probe), and no other forward-proxy process on the
// machine: nothing leaked, nothing lost.
func TestOperatorKilledMidReplace(t *testing.T) {
	ns := newNamespace(t)
	stateDir := t.TempDir()
	t.Cleanup(func() { killForwardProxies(t, stateDir) })
	if pids := forwardProxyProcesses(t, stateDir); len(pids) != 0 {
		t.Fatalf("forward-proxy processes %v run before the test", pids)
	}
	_, crawl := clients(t)
	proxies := crawl.CrawlV1alpha1().Proxies(ns)
	operatorFlags := append([]string{"--providers=local", "--local-state-dir=" + stateDir}, shortLeaderElection...)
	op := startOperator(t, "operator-0", ns, operatorFlags...)

	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "replaced"},
		Spec: crawlv1alpha1.ProxySpec{
			Provider:    crawlv1alpha1.ProviderLocal,
			HealthCheck: fastHealthCheck(proxytest.StartHTTPTarget(t).URL),
		},
	}
	if _, err := proxies.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplaced(t, ns, "replaced", "")

	round := 0
	for rep := range integration.Scaled(1, 5) {
		for _, point := range killPoints {
			round++
			t.Logf("round %d (repetition %d): kill at %q", round, rep+1, point.name)
			before := onlyInstance(t, stateDir)
			oldHash := getProxy(t, ns, "replaced").Annotations[crawlv1alpha1.SpecHashAnnotation]

			updateProxy(t, ns, "replaced", func(p *crawlv1alpha1.Proxy) {
				p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To(fmt.Sprintf("#cloud-config\n# round %d\n", round))}
			})
			s := waitForKillPoint(t, ns, stateDir, before, point)
			op.Kill()
			if replaceFinished(s.proxy, oldHash) {
				t.Errorf("round %d: the replace had finished when the kill at %q came; the round tested nothing", round, point.name)
			}
			t.Logf("round %d: killed with the old process %s, %d state files, condition %q",
				round, map[bool]string{true: "running", false: "gone"}[s.oldRunning], len(s.instances),
				conditionReason(s.proxy, crawlv1alpha1.ConditionProvisioned))

			op = startOperator(t, fmt.Sprintf("operator-%d", round), ns, operatorFlags...)
			got := waitReplaced(t, ns, "replaced", oldHash)
			after := onlyInstance(t, stateDir)
			if after.PID == before.PID {
				t.Errorf("round %d: the instance still runs as pid %d: not replaced", round, after.PID)
			}
			if after.SpecHash != got.Annotations[crawlv1alpha1.SpecHashAnnotation] {
				t.Errorf("round %d: the instance was built from spec hash %q, the Proxy records %q", round, after.SpecHash, got.Annotations[crawlv1alpha1.SpecHashAnnotation])
			}
			if got.Status.IP != after.Host || got.Status.Port != after.Port {
				t.Errorf("round %d: status says %s:%d, the instance listens on %s:%d", round, got.Status.IP, got.Status.Port, after.Host, after.Port)
			}
			if pids := forwardProxyProcesses(t, stateDir); !slices.Equal(pids, []int{after.PID}) {
				t.Errorf("round %d: forward-proxy processes %v, want only the instance's %d", round, pids, after.PID)
			}
		}
	}

	// Deleting the Proxy removes its instance: nothing outlives it.
	if err := proxies.Delete(t.Context(), "replaced", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, pollInterval, "the Proxy and its instance gone", func(ctx context.Context) error {
		if _, err := proxies.Get(ctx, "replaced", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Proxy is still there (%v)", err)
		}
		if n, pids := len(localInstances(t, stateDir)), forwardProxyProcesses(t, stateDir); n != 0 || len(pids) != 0 {
			return fmt.Errorf("%d state files and processes %v left", n, pids)
		}
		return nil
	})
	if !op.Running() {
		t.Errorf("the last operator %s", op.Exit())
	}
}

// waitForKillPoint watches the replace closely (every 2ms) until point is
// reached, and returns what it saw then.
func waitForKillPoint(t *testing.T, ns, stateDir string, old localInstance, point killPoint) replaceSnapshot {
	t.Helper()
	_, crawl := clients(t)
	var s replaceSnapshot
	eventually.Check(t, 30*time.Second, 2*time.Millisecond, "the replace reaching "+point.name, func(context.Context) error {
		p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(t.Context(), "replaced", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
		}
		s = replaceSnapshot{proxy: p, instances: localInstances(t, stateDir), oldRunning: processRuns(old.PID)}
		if point.reached(s, old) {
			return nil
		}
		return fmt.Errorf("condition %q, %d state files, old process running %v",
			conditionReason(p, crawlv1alpha1.ConditionProvisioned), len(s.instances), s.oldRunning)
	})
	return s
}

// replaceFinished: the Proxy is Ready on an instance built from a spec
// other than the one with oldHash.
func replaceFinished(p *crawlv1alpha1.Proxy, oldHash string) bool {
	hash := p.Annotations[crawlv1alpha1.SpecHashAnnotation]
	return hash != "" && hash != oldHash && p.Status.Phase == crawlv1alpha1.PhaseReady &&
		p.Status.ObservedGeneration == p.Generation && p.Status.ProviderID != ""
}

// waitReplaced waits until the Proxy is Ready at its current generation on
// an instance whose spec hash is not oldHash.
func waitReplaced(t *testing.T, ns, name, oldHash string) *crawlv1alpha1.Proxy {
	t.Helper()
	var got *crawlv1alpha1.Proxy
	eventually.Check(t, time.Minute, pollInterval, name+" Ready on a new instance", func(ctx context.Context) error {
		got = getProxyCtx(ctx, t, ns, name)
		if got == nil {
			return errors.New("the Proxy does not exist")
		}
		if !replaceFinished(got, oldHash) {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	return got
}

// onlyInstance returns the local provider's one instance, failing the test
// if there are more or none.
func onlyInstance(t *testing.T, stateDir string) localInstance {
	t.Helper()
	insts := localInstances(t, stateDir)
	if len(insts) != 1 {
		t.Fatalf("%d local instances, want exactly 1: %+v", len(insts), insts)
	}
	if !processRuns(insts[0].PID) {
		t.Fatalf("instance %s: its process %d does not run", insts[0].ID, insts[0].PID)
	}
	return insts[0]
}

// processRuns reports whether pid is a live (not zombie) process.
func processRuns(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !operatortest.Zombie(pid)
}

func conditionReason(p *crawlv1alpha1.Proxy, condType string) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, condType); c != nil {
		return c.Reason
	}
	return ""
}

func getProxy(t *testing.T, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	p := getProxyCtx(t.Context(), t, ns, name)
	if p == nil {
		t.Fatalf("Proxy %s/%s not found", ns, name)
	}
	return p
}

// getProxyCtx reads a Proxy; nil if it does not exist.
func getProxyCtx(ctx context.Context, t *testing.T, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	_, crawl := clients(t)
	p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil && ctx.Err() != nil:
		return &crawlv1alpha1.Proxy{} // the wait is over; its caller reports
	case err != nil:
		t.Fatal(err)
	}
	return p
}

// updateProxy applies change to the stored Proxy, retrying on conflicts with
// the operator's writes.
func updateProxy(t *testing.T, ns, name string, change func(*crawlv1alpha1.Proxy)) {
	t.Helper()
	_, crawl := clients(t)
	eventually.Check(t, 10*time.Second, 20*time.Millisecond, "updating "+name, func(ctx context.Context) error {
		p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		_, err = crawl.CrawlV1alpha1().Proxies(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}
