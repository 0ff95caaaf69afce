package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

// harness is the shared controller harness with the fake provider as
// "local".
type harness struct {
	*controllertest.Harness
	provider *fake.Provider
}

type harnessOptions struct {
	workers  int
	provider *fake.Provider // "local"
	// kubernetes, when set, is a second provider registered as "kubernetes".
	kubernetes *fake.Provider
}

func startController(t *testing.T, opts harnessOptions) *harness {
	env := apiServer.Get(t)
	t.Helper()
	if opts.provider == nil {
		opts.provider = fake.New()
	}
	providers := map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: opts.provider}
	if opts.kubernetes != nil {
		providers[crawlv1alpha1.ProviderKubernetes] = opts.kubernetes
	}
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{Providers: providers, Workers: opts.workers,
			// The fakes stand in for these two: their blocks hash as in production.
			Registry: provider.Registry{local.Registration(), kubernetes.Registration()}}),
		provider: opts.provider,
	}
}

func managed(name string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal},
	}
}

func external(name string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: port},
		},
	}
}

func TestCreateBecomesReady(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	created := h.Create(managed("p1"))
	p := h.MakeReady("p1")

	if got, want := p.Status.ProviderID, provider.ProviderID("local", provider.InstanceName(created.UID)); got != want {
		t.Errorf("providerID = %q, want %q", got, want)
	}
	if !slicesContain(p.Finalizers, crawlv1alpha1.Finalizer) || p.Annotations[crawlv1alpha1.SpecHashAnnotation] == "" {
		t.Errorf("finalizer %v / spec-hash %q not recorded", p.Finalizers, p.Annotations[crawlv1alpha1.SpecHashAnnotation])
	}
	inst, ok := h.provider.Instance(provider.InstanceName(created.UID))
	if !ok {
		t.Fatal("the fake provider has no instance")
	}
	for k, v := range provider.Tags(created) {
		if inst.Tags[k] != v {
			t.Errorf("instance tag %s = %q, want %q", k, inst.Tags[k], v)
		}
	}
	if p.Status.LatencyMillis != 3 || p.Status.LastHealthCheckTime == nil {
		t.Errorf("latency %d / last check %v not recorded", p.Status.LatencyMillis, p.Status.LastHealthCheckTime)
	}
}

func TestSpecEditReplacesInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{provider: fake.New(fake.WithDeletionDelay(300 * time.Millisecond))})
	h.Create(managed("p1"))
	h.MakeReady("p1")
	oldHash := h.Get("p1").Annotations[crawlv1alpha1.SpecHashAnnotation]

	h.Update("p1", func(p *crawlv1alpha1.Proxy) {
		p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n# v2\n")}
	})
	h.Eventually(20*time.Second, "replacement created", func() (bool, string) {
		reqs := h.provider.CreateRequests()
		return len(reqs) == 2 && string(reqs[1].CloudInit) == "#cloud-config\n# v2\n", fmt.Sprintf("%d create requests", len(reqs))
	})
	p := h.MakeReady("p1")
	if p.Annotations[crawlv1alpha1.SpecHashAnnotation] == oldHash {
		t.Error("spec-hash annotation not updated")
	}
	if n := len(h.provider.Instances()); n != 1 {
		t.Errorf("%d instances after the replace, want exactly 1", n)
	}
	// An edit of healthCheck or maxLeases does not replace.
	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.MaxLeases = 4 })
	h.Eventually(10*time.Second, "maxLeases edit observed", func() (bool, string) {
		p := h.Get("p1")
		return p.Status.ObservedGeneration == p.Generation, fmt.Sprintf("observed %d of %d", p.Status.ObservedGeneration, p.Generation)
	})
	if n := len(h.provider.CreateRequests()); n != 2 {
		t.Errorf("a maxLeases edit caused a create (%d creates)", n)
	}
}

func TestCloudInitSecretRotationReplacesInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	secrets := h.Kube.CoreV1().Secrets(h.NS)
	secret, err := secrets.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "user-data"},
		Data:       map[string][]byte{"user-data": []byte("version: 1\n")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := managed("p1")
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "user-data"}}
	h.Create(p)
	h.MakeReady("p1")

	secret.Data["user-data"] = []byte("version: 2\n")
	if _, err := secrets.Update(context.Background(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(20*time.Second, "replacement with the rotated cloud-init", func() (bool, string) {
		reqs := h.provider.CreateRequests()
		return len(reqs) == 2 && string(reqs[1].CloudInit) == "version: 2\n", fmt.Sprintf("%d create requests", len(reqs))
	})
	h.MakeReady("p1")
	if n := len(h.provider.Instances()); n != 1 {
		t.Errorf("%d instances after the rotation, want 1", n)
	}
}

// TestProviderChangeMovesInstance: switching spec.provider deletes the old
// instance through the provider that made it, then creates one with the new.
func TestProviderChangeMovesInstance(t *testing.T) {
	t.Parallel()
	pods := fake.New()
	h := startController(t, harnessOptions{kubernetes: pods})
	h.Create(managed("p1"))
	h.MakeReady("p1")

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.Provider = crawlv1alpha1.ProviderKubernetes })
	h.Eventually(20*time.Second, "instance moved", func() (bool, string) {
		return len(h.provider.Instances()) == 0 && len(pods.Instances()) == 1,
			fmt.Sprintf("%d local and %d kubernetes instances", len(h.provider.Instances()), len(pods.Instances()))
	})
	p := h.MakeReady("p1")
	if !strings.HasPrefix(p.Status.ProviderID, "kubernetes://") {
		t.Errorf("providerID %q does not name the new provider", p.Status.ProviderID)
	}
}

// TestCredentialsRotationReplacesInstance: instances are configured with the
// credentials, so a new password in the auth Secret replaces the instance.
func TestCredentialsRotationReplacesInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	secrets := h.Kube.CoreV1().Secrets(h.NS)
	creds, err := secrets.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte("first")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := managed("p1")
	p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}
	h.Create(p)
	h.MakeReady("p1")
	hash := h.Get("p1").Annotations[crawlv1alpha1.SpecHashAnnotation]

	creds.Data["password"] = []byte("second")
	if _, err := secrets.Update(context.Background(), creds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(20*time.Second, "replacement after the rotation", func() (bool, string) {
		return len(h.provider.CreateRequests()) == 2, fmt.Sprintf("%d create requests", len(h.provider.CreateRequests()))
	})
	got := h.MakeReady("p1")
	if got.Annotations[crawlv1alpha1.SpecHashAnnotation] == hash {
		t.Error("the spec hash did not change with the credentials")
	}
	if strings.Contains(got.Annotations[crawlv1alpha1.SpecHashAnnotation], "second") {
		t.Error("the password reached the annotation")
	}
}

func TestDeleteRemovesInstanceThenObject(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{provider: fake.New(fake.WithDeletionDelay(500 * time.Millisecond))})
	h.Create(managed("p1"))
	h.MakeReady("p1")

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(20*time.Second, "object gone", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(context.Background(), "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if n := len(h.provider.Instances()); n != 0 {
		t.Errorf("%d instances left after delete", n)
	}
	if h.provider.CallCount(fake.OpDelete) == 0 {
		t.Error("the provider's Delete was never called")
	}
}

func TestQuotaExceededThenRecovers(t *testing.T) {
	t.Parallel()
	fp := fake.New()
	fp.SetQuota(0)
	h := startController(t, harnessOptions{provider: fp})
	h.Create(managed("p1"))
	h.Eventually(20*time.Second, "QuotaExceeded", func() (bool, string) {
		p := h.Get("p1")
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == controller.ReasonQuotaExceeded, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	fp.SetQuota(-1)
	h.MakeReady("p1")
}

func TestPermanentErrorFailsUntilSpecChanges(t *testing.T) {
	t.Parallel()
	fp := fake.New()
	fp.FailNext(fake.OpCreate, provider.Permanent(fmt.Errorf("machine type does not exist")), 1)
	h := startController(t, harnessOptions{provider: fp, workers: 1})
	h.Create(managed("p1"))
	p := h.WaitForPhase("p1", crawlv1alpha1.PhaseFailed)
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); !strings.Contains(c.Message, "machine type does not exist") {
		t.Errorf("condition message %q does not carry the provider's reason", c.Message)
	}

	calls := len(fp.Calls())
	// Push the key through the queue several times, then a barrier: with one
	// worker the queue is FIFO, so once the barrier proxy has its status the
	// failed proxy's syncs have all run.
	for range 3 {
		h.Ctrl.Enqueue(h.Key("p1"))
	}
	h.Create(external("barrier", 3128))
	h.Eventually(10*time.Second, "barrier synced", func() (bool, string) {
		return h.Get("barrier").Status.ObservedGeneration == 1, "no status yet"
	})
	if got := len(fp.Calls()); got != calls {
		t.Errorf("provider calls went from %d to %d while the proxy was Failed", calls, got)
	}

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To("fixed")} })
	h.MakeReady("p1")
}

func TestManyProxiesConvergeUnderTransientErrors(t *testing.T) {
	t.Parallel()
	fp := fake.New(fake.WithProvisioningDelay(200 * time.Millisecond))
	fp.SetRandomFaults(0.3, []error{provider.ErrTransient}, 42)
	h := startController(t, harnessOptions{provider: fp})
	const n = 100
	for i := range n {
		h.Create(managed(fmt.Sprintf("p%03d", i)))
	}
	h.Eventually(2*time.Minute, "all provisioned", func() (bool, string) {
		list, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d provisioned", ready, n)
	})
	if got := len(fp.Instances()); got != n {
		t.Errorf("%d instances for %d proxies", got, n)
	}
	if fp.CallCount(fake.OpCreate) <= n {
		t.Errorf("only %d creates: the faults were not exercised", fp.CallCount(fake.OpCreate))
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(2*time.Minute, "all deleted", func() (bool, string) {
		list, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0 && len(fp.Instances()) == 0,
			fmt.Sprintf("%d proxies and %d instances left", len(list.Items), len(fp.Instances()))
	})
}

// TestWritesPerProxy: 100 External proxies reach Ready with at most two
// writes each (endpoint recorded; verdict), and a further minute of steady
// state, with every key pushed through the queue again every second, makes
// no write at all.
func TestWritesPerProxy(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	const n = 100
	for i := range n {
		h.Create(external(fmt.Sprintf("x%03d", i), int32(20000+i)))
	}
	h.Eventually(time.Minute, "endpoints recorded", func() (bool, string) {
		pending := 0
		for i := range n {
			if h.Get(fmt.Sprintf("x%03d", i)).Status.Phase == crawlv1alpha1.PhasePending {
				pending++
			}
		}
		return pending == n, fmt.Sprintf("%d of %d Pending", pending, n)
	})
	for i := range n {
		h.Health.Set(h.Key(fmt.Sprintf("x%03d", i)), controllertest.Verdict(fmt.Sprintf("127.0.0.1:%d", 20000+i), true))
	}
	h.Eventually(time.Minute, "all Ready", func() (bool, string) {
		ready := 0
		for i := range n {
			if h.Get(fmt.Sprintf("x%03d", i)).Status.Phase == crawlv1alpha1.PhaseReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	converged := h.Writes.Snapshot()
	for i := range n {
		name := fmt.Sprintf("x%03d", i)
		if converged[name] > 2 {
			t.Errorf("%s took %d writes, want at most 2", name, converged[name])
		}
	}

	var resyncs atomic.Int64
	deadline := time.Now().Add(60 * time.Second)
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 61*time.Second, false, func(context.Context) (bool, error) {
		for i := range n {
			h.Ctrl.Enqueue(h.Key(fmt.Sprintf("x%03d", i)))
		}
		resyncs.Add(1)
		return time.Now().After(deadline), nil
	})
	steady := h.Writes.Snapshot()
	for name, count := range steady {
		if count != converged[name] {
			t.Errorf("%s: %d writes during steady state", name, count-converged[name])
		}
	}
	t.Logf("%d proxies, %d writes to converge, %d rounds of re-syncs in steady state", n, sum(converged), resyncs.Load())
}

func sum(m map[string]int) int {
	total := 0
	for _, v := range m {
		total += v
	}
	return total
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
