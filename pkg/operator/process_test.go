package operator_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// pollInterval is how often tests look again; waits are bounded by a deadline.
const pollInterval = 100 * time.Millisecond

// leaseTimings are short leader-election settings, so failover fits a test.
var leaseTimings = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=500ms",
}

// startOperator runs the operator against env with flags for ns (its
// Proxies and its Lease) plus extra; it is killed when the test ends and
// its log is printed if the test failed (or OPERATOR_TEST_LOGS is set).
func startOperator(t *testing.T, name, ns string, extra ...string) *operatortest.Process {
	t.Helper()
	return operatortest.StartOnNamespace(t, shared.Get(t).Env, shared.Get(t).Binary, name, ns, "OPERATOR_TEST_LOGS", extra...)
}

// kill ends p with SIGKILL (no drain, no lease release), failing the test
// if p had already ended on its own.
func kill(t *testing.T, p *operatortest.Process) {
	t.Helper()
	if !p.Running() {
		t.Fatalf("operator %s ended before being killed: %s", p.Name, p.Exit())
	}
	p.Kill()
}

// leaderGauge is p's proxy_operator_leader gauge: 1 while p leads.
func leaderGauge(ctx context.Context, p *operatortest.Process) (float64, error) {
	s, err := p.Scrape(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := s.Value("proxy_operator_leader", nil)
	if !ok {
		return 0, errors.New("no proxy_operator_leader in /metrics")
	}
	return v, nil
}

// waitForLeader waits until exactly one of ps leads and returns it and the others.
func waitForLeader(t *testing.T, timeout time.Duration, ps ...*operatortest.Process) (leader *operatortest.Process, standbys []*operatortest.Process) {
	t.Helper()
	eventually.Check(t, timeout, pollInterval, "one operator leads", func(ctx context.Context) error {
		leader, standbys = nil, nil
		var leading []string
		for _, p := range ps {
			v, err := leaderGauge(ctx, p)
			if err != nil {
				return err
			}
			if v == 1 {
				leader = p
				leading = append(leading, p.Name)
			} else {
				standbys = append(standbys, p)
			}
		}
		if len(leading) != 1 {
			return fmt.Errorf("leading: %q", leading)
		}
		return nil
	})
	return leader, standbys
}

// waitReady waits until /readyz of p says 200.
func waitReady(t *testing.T, p *operatortest.Process, timeout time.Duration) {
	t.Helper()
	eventually.Check(t, timeout, pollInterval, "operator "+p.Name+" ready", func(ctx context.Context) error {
		code, body, err := p.Get(ctx, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
}

func clients(t *testing.T) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	return kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
}

// newNamespace creates a namespace of the test's own (never deleted: there
// is no namespace controller; it goes with the environment).
func newNamespace(t *testing.T) string {
	t.Helper()
	kube, _ := clients(t)
	return operatortest.NewNamespace(t, kube)
}

// createExternalProxy creates an External Proxy at 127.0.0.1:port.
func createExternalProxy(t *testing.T, ns, name string, port int32) {
	t.Helper()
	_, crawl := clients(t)
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: port},
		},
	}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Proxy %s/%s: %v", ns, name, err)
	}
}

// waitConverged waits until every Proxy in ns has status for its current
// generation: observedGeneration, the Provisioned condition, the endpoint.
func waitConverged(t *testing.T, ns string, want int, timeout time.Duration) {
	t.Helper()
	_, crawl := clients(t)
	eventually.Check(t, timeout, pollInterval, "every Proxy reconciled", func(ctx context.Context) error {
		list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("%d Proxies, want %d", len(list.Items), want)
		}
		var behind []string
		for _, p := range list.Items {
			if !converged(&p) {
				behind = append(behind, fmt.Sprintf("%s (generation %d, status %+v)", p.Name, p.Generation, p.Status))
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("not reconciled: %s", strings.Join(behind, "; "))
		}
		return nil
	})
}

func converged(p *crawlv1alpha1.Proxy) bool {
	if p.Status.ObservedGeneration != p.Generation || p.Spec.Endpoint == nil {
		return false
	}
	if p.Status.IP != p.Spec.Endpoint.Host || p.Status.Port != p.Spec.Endpoint.Port {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == crawlv1alpha1.ConditionProvisioned {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
		}
	}
	return false
}

// leaseHolder reads the holder of the operator's Lease in ns.
func leaseHolder(ctx context.Context, t *testing.T, ns string) (string, error) {
	kube, _ := clients(t)
	lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, "proxy-operator", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
