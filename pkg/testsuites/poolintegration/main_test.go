package poolintegration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// shared is cmd/proxy-operator, built once for the package, and the real API
// server its processes share.
var shared = operatortest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// poolTest is one test's namespace, operator and local state directory.
type poolTest struct {
	t        *testing.T
	ns       string
	stateDir string
	kube     kubernetes.Interface
	crawl    versioned.Interface
	flags    []string
	env      []string // the operator's environment beyond flags (the aws provider's)
	op       *operatortest.Process
	// gateway is the gateway-tier replica startGateway ran, nil before.
	gateway *operatortest.Process
}

func newPoolTest(t *testing.T, extra ...string) *poolTest {
	t.Helper()
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir()}
	pt.ns = operatortest.NewNamespace(t, kube)
	t.Cleanup(pt.killInstances)
	pt.flags = append([]string{"--providers=local", "--local-state-dir=" + pt.stateDir}, extra...)
	return pt.start()
}

// start runs the first operator, with the suite's common flags in front.
func (pt *poolTest) start() *poolTest {
	pt.flags = append([]string{"--lease-auth=none",
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms"}, pt.flags...)
	pt.op = pt.startOperator("operator-0")
	return pt
}

func (pt *poolTest) startOperator(name string) *operatortest.Process {
	kubeconfig := filepath.Join(pt.t.TempDir(), "kubeconfig")
	if err := shared.Get(pt.t).Env.WriteKubeconfig(kubeconfig); err != nil {
		pt.t.Fatal(err)
	}
	return operatortest.Start(pt.t, operatortest.ProcessOptions{
		Binary: shared.Get(pt.t).Binary, Name: name, Args: append(operatortest.NamespaceArgs(kubeconfig, pt.ns), pt.flags...),
		Env: pt.env, LogsEnv: "POOL_LOGS",
	})
}

// startGateway runs one gateway-tier replica (`proxy-operator gateway`,
// docs/gateway.md) on the first operator's lease API, without auth as the
// operator, and returns its listen address (host:port) once it reaches the
// leader.
func (pt *poolTest) startGateway(extra ...string) string {
	pt.t.Helper()
	kubeconfig := filepath.Join(pt.t.TempDir(), "kubeconfig") // for the CrawlPolicies' ban rules
	if err := shared.Get(pt.t).Env.WriteKubeconfig(kubeconfig); err != nil {
		pt.t.Fatal(err)
	}
	pt.gateway = operatortest.Start(pt.t, operatortest.ProcessOptions{
		Binary: shared.Get(pt.t).Binary, Name: "gateway", Gateway: true, LogsEnv: "POOL_LOGS",
		Args: append([]string{"--lease-url=http://" + pt.op.LeaseAddr, "--lease-auth=none", "--drain-delay=0s", "--kubeconfig=" + kubeconfig}, extra...),
	})
	eventually.Check(pt.t, time.Minute, interval, "the gateway reaches the lease API's leader", func(ctx context.Context) error {
		status, body, err := pt.gateway.Get(ctx, "/readyz")
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s %v", status, body, err)
		}
		return nil
	})
	return pt.gateway.LeaseAddr
}

// fastHealthCheck probes every second through the proxy to a loopback target.
func fastHealthCheck(target string) crawlv1alpha1.HealthCheck {
	return crawlv1alpha1.HealthCheck{
		URL:      target + "/generate_204",
		Interval: &metav1.Duration{Duration: time.Second},
		Timeout:  &metav1.Duration{Duration: 900 * time.Millisecond},
	}
}

// newPool is a pool of local members probing target.
func newPool(name string, replicas int32, target string, change ...func(*crawlv1alpha1.ProxyPool)) *crawlv1alpha1.ProxyPool {
	p := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To(replicas),
			Template: crawlv1alpha1.ProxyTemplate{
				Metadata: crawlv1alpha1.TemplateMetadata{Labels: map[string]string{"team": "crawl"}},
				Spec: crawlv1alpha1.ProxySpec{
					Provider:    crawlv1alpha1.ProviderLocal,
					HealthCheck: fastHealthCheck(target),
				},
			},
			Strategy: crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
	}
	for _, c := range change {
		c(p)
	}
	return p
}

func (pt *poolTest) create(p *crawlv1alpha1.ProxyPool) {
	pt.t.Helper()
	if _, err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Create(pt.t.Context(), p, metav1.CreateOptions{}); err != nil {
		pt.t.Fatal(err)
	}
}

func (pt *poolTest) createSecret(name string, data map[string]string) {
	pt.t.Helper()
	pt.createSecretWith(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data})
}

// createCredentialsSecret creates a credentials Secret, marked for proxies.
func (pt *poolTest) createCredentialsSecret(name string, data map[string]string) {
	pt.t.Helper()
	pt.createSecretWith(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}}, StringData: data})
}

func (pt *poolTest) createSecretWith(s *corev1.Secret) {
	pt.t.Helper()
	if _, err := pt.kube.CoreV1().Secrets(pt.ns).Create(pt.t.Context(), s, metav1.CreateOptions{}); err != nil {
		pt.t.Fatal(err)
	}
}

func (pt *poolTest) updateSecret(name string, data map[string]string) {
	pt.t.Helper()
	s, err := pt.kube.CoreV1().Secrets(pt.ns).Get(pt.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		pt.t.Fatal(err)
	}
	s.Data = nil
	s.StringData = data
	if _, err := pt.kube.CoreV1().Secrets(pt.ns).Update(pt.t.Context(), s, metav1.UpdateOptions{}); err != nil {
		pt.t.Fatal(err)
	}
}

func (pt *poolTest) updatePool(name string, change func(*crawlv1alpha1.ProxyPool)) {
	pt.t.Helper()
	for {
		p, err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Get(pt.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			pt.t.Fatal(err)
		}
		change(p)
		_, err = pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Update(pt.t.Context(), p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "modified") {
			pt.t.Fatal(err)
		}
	}
}

func (pt *poolTest) pool(ctx context.Context, name string) (*crawlv1alpha1.ProxyPool, error) {
	return pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Get(ctx, name, metav1.GetOptions{})
}

// members lists the pool's members straight from the API server.
func (pt *poolTest) members(ctx context.Context, pool string) ([]crawlv1alpha1.Proxy, error) {
	list, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolLabel + "=" + pool})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func ready(ms []crawlv1alpha1.Proxy) int {
	n := 0
	for _, m := range ms {
		if m.Status.Phase == crawlv1alpha1.PhaseReady && m.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// settled is nil once the pool has exactly replicas members, every one
// Ready on the pool's current revision, and says Complete.
func (pt *poolTest) settled(ctx context.Context, name string, replicas int) error {
	p, err := pt.pool(ctx, name)
	if err != nil {
		return err
	}
	ms, err := pt.members(ctx, name)
	if err != nil {
		return err
	}
	if p.Status.Revision == "" {
		return errors.New("no revision in status yet")
	}
	var notReady []string
	for _, m := range ms {
		if m.Labels[crawlv1alpha1.PoolRevisionLabel] != p.Status.Revision || m.Status.Phase != crawlv1alpha1.PhaseReady || m.DeletionTimestamp != nil {
			notReady = append(notReady, fmt.Sprintf("%s(%s,%s)", m.Name, m.Labels[crawlv1alpha1.PoolRevisionLabel], m.Status.Phase))
		}
	}
	if len(ms) != replicas || len(notReady) > 0 {
		return fmt.Errorf("%d members, not settled: %v (revision %s)", len(ms), notReady, p.Status.Revision)
	}
	if int(p.Status.UpdatedReplicas) != replicas || int(p.Status.ReadyReplicas) != replicas || p.Status.ObservedGeneration != p.Generation {
		return fmt.Errorf("status %+v", p.Status)
	}
	return nil
}

// interval is how often this suite's waits look again.
const interval = 200 * time.Millisecond

func (pt *poolTest) instances() []operatortest.LocalInstance {
	return operatortest.LocalInstances(pt.t, pt.stateDir)
}

// processes are the live forward-proxy processes the local provider
// started for this test's state directory.
func (pt *poolTest) processes() []int {
	return operatortest.ForwardProxyProcesses(pt.t, shared.Get(pt.t).Binary, pt.stateDir)
}

// noLeak is nil when the instances are exactly the members' instances, each
// with its process, and no other forward-proxy process runs for the test's
// state directory.
func (pt *poolTest) noLeak(ctx context.Context, pool string) error {
	ms, err := pt.members(ctx, pool)
	if err != nil {
		return err
	}
	return operatortest.LocalLeaks(pt.t, ms, pt.stateDir, shared.Get(pt.t).Binary)
}

func (pt *poolTest) killInstances() {
	operatortest.KillForwardProxies(pt.t, shared.Get(pt.t).Binary, pt.stateDir)
}

// sampler lists the members every 100ms until stopped, keeping the lowest
// Ready count and the highest member count it saw.
type sampler struct {
	stop                          chan struct{}
	done                          chan struct{}
	minReady, maxMembers, samples int
	errs                          []error
}

func (pt *poolTest) sample(pool string) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), minReady: 1 << 30}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			ms, err := pt.members(context.Background(), pool)
			if err != nil {
				s.errs = append(s.errs, err)
				continue
			}
			s.samples++
			s.minReady = min(s.minReady, ready(ms))
			s.maxMembers = max(s.maxMembers, len(ms))
		}
	}()
	return s
}

func (s *sampler) finish() *sampler {
	close(s.stop)
	<-s.done
	return s
}
