package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/fake"
	"github.com/proxyfleet/proxy-operator/pkg/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, &env) }

// testHealth plays the health engine: tests set verdicts and push the key.
type testHealth struct {
	mu       sync.Mutex
	verdicts map[cache.ObjectName]controller.HealthVerdict
	ctrl     *controller.Controller
}

func (h *testHealth) Verdict(key cache.ObjectName) (controller.HealthVerdict, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.verdicts[key]
	return v, ok
}

func (h *testHealth) set(key cache.ObjectName, addr string, healthy bool) {
	h.mu.Lock()
	h.verdicts[key] = controller.HealthVerdict{Address: addr, Healthy: healthy, Message: "test verdict", Latency: 3 * time.Millisecond, CheckedAt: time.Now()}
	h.mu.Unlock()
	h.ctrl.Enqueue(key)
}

// writeCounter counts the operator's writes to Proxy objects, per object.
type writeCounter struct {
	mu     sync.Mutex
	byName map[string]int
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			if _, rest, ok := strings.Cut(req.URL.Path, "/proxies/"); ok {
				name, _, _ := strings.Cut(rest, "/")
				w.mu.Lock()
				w.byName[name]++
				w.mu.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.byName))
	for k, v := range w.byName {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// harness runs a real Controller against the real API server in a namespace
// of its own, with the fake provider as "local".
type harness struct {
	t        *testing.T
	ns       string
	crawl    versioned.Interface
	kube     kubernetes.Interface
	provider *fake.Provider
	health   *testHealth
	writes   *writeCounter
}

type harnessOptions struct {
	workers  int
	provider *fake.Provider // "local"
	// kubernetes, when set, is a second provider registered as "kubernetes".
	kubernetes *fake.Provider
}

func startController(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	if opts.workers == 0 {
		opts.workers = 3
	}
	if opts.provider == nil {
		opts.provider = fake.New()
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	h := &harness{t: t, provider: opts.provider, writes: &writeCounter{byName: map[string]int{}},
		health: &testHealth{verdicts: map[cache.ObjectName]controller.HealthVerdict{}}}

	admin := versioned.NewForConfigOrDie(env.Config)
	h.kube = kubernetes.NewForConfigOrDie(env.Config)
	h.crawl = admin
	ns, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.ns = ns.Name

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Wrap(h.writes.wrap)
	operatorCrawl := versioned.NewForConfigOrDie(cfg)
	operatorKube := kubernetes.NewForConfigOrDie(cfg)
	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(operatorCrawl, 0, crawlinformers.WithNamespace(h.ns))
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(operatorKube, 0, kubeinformers.WithNamespace(h.ns))
	providers := map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: h.provider}
	if opts.kubernetes != nil {
		providers[crawlv1alpha1.ProviderKubernetes] = opts.kubernetes
	}
	ctrl, err := controller.NewController(controller.Config{
		CrawlClient:      operatorCrawl,
		KubeClient:       operatorKube,
		ProxyInformer:    crawlFactory.Crawl().V1alpha1().Proxies(),
		SecretInformer:   kubeFactory.Core().V1().Secrets(),
		Providers:        providers,
		Health:           h.health,
		ProvisioningPoll: 100 * time.Millisecond,
		DeletionPoll:     100 * time.Millisecond,
		DriftPoll:        time.Second,
		QuotaRetry:       300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.health.ctrl = ctrl
	crawlFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	runDone := make(chan error, 1)
	go func() { runDone <- ctrl.Run(ctx, opts.workers) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("controller.Run: %v", err)
		}
		crawlFactory.Shutdown()
		kubeFactory.Shutdown()
	})
	return h
}

func (h *harness) key(name string) cache.ObjectName { return cache.NewObjectName(h.ns, name) }

func (h *harness) create(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	h.t.Helper()
	p.Namespace = h.ns
	created, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return created
}

func (h *harness) get(name string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	p, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// update applies change to the stored object, retrying on conflicts with the
// controller's own writes.
func (h *harness) update(name string, change func(*crawlv1alpha1.Proxy)) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(p)
		_, err = h.crawl.CrawlV1alpha1().Proxies(h.ns).Update(ctx, p, metav1.UpdateOptions{})
		return err == nil, ignoreConflict(err)
	})
	if err != nil {
		h.t.Fatalf("updating %s: %v", name, err)
	}
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// eventually polls cond until it holds or the deadline passes; the message of
// the last attempt explains a failure.
func (h *harness) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	h.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		h.t.Fatalf("%s: not within %s: %s", what, timeout, last)
	}
}

func (h *harness) waitForPhase(name string, phase crawlv1alpha1.ProxyPhase) *crawlv1alpha1.Proxy {
	h.t.Helper()
	var p *crawlv1alpha1.Proxy
	h.eventually(20*time.Second, name+" phase "+string(phase), func() (bool, string) {
		p = h.get(name)
		return p.Status.Phase == phase, fmt.Sprintf("phase %q, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	return p
}

// makeReady waits for the instance to run and reports it healthy.
func (h *harness) makeReady(name string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	h.eventually(20*time.Second, name+" provisioned", func() (bool, string) {
		p := h.get(name)
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	p := h.get(name)
	h.health.set(h.key(name), fmt.Sprintf("%s:%d", p.Status.IP, p.Status.Port), true)
	return h.waitForPhase(name, crawlv1alpha1.PhaseReady)
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
	created := h.create(managed("p1"))
	p := h.makeReady("p1")

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
	h.create(managed("p1"))
	h.makeReady("p1")
	oldHash := h.get("p1").Annotations[crawlv1alpha1.SpecHashAnnotation]

	h.update("p1", func(p *crawlv1alpha1.Proxy) {
		p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n# v2\n")}
	})
	h.eventually(20*time.Second, "replacement created", func() (bool, string) {
		reqs := h.provider.CreateRequests()
		return len(reqs) == 2 && string(reqs[1].CloudInit) == "#cloud-config\n# v2\n", fmt.Sprintf("%d create requests", len(reqs))
	})
	p := h.makeReady("p1")
	if p.Annotations[crawlv1alpha1.SpecHashAnnotation] == oldHash {
		t.Error("spec-hash annotation not updated")
	}
	if n := len(h.provider.Instances()); n != 1 {
		t.Errorf("%d instances after the replace, want exactly 1", n)
	}
	// An edit of healthCheck or maxLeases does not replace.
	h.update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.MaxLeases = 4 })
	h.eventually(10*time.Second, "maxLeases edit observed", func() (bool, string) {
		p := h.get("p1")
		return p.Status.ObservedGeneration == p.Generation, fmt.Sprintf("observed %d of %d", p.Status.ObservedGeneration, p.Generation)
	})
	if n := len(h.provider.CreateRequests()); n != 2 {
		t.Errorf("a maxLeases edit caused a create (%d creates)", n)
	}
}

func TestCloudInitSecretRotationReplacesInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	secrets := h.kube.CoreV1().Secrets(h.ns)
	secret, err := secrets.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "user-data"},
		Data:       map[string][]byte{"user-data": []byte("version: 1\n")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := managed("p1")
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "user-data"}}
	h.create(p)
	h.makeReady("p1")

	secret.Data["user-data"] = []byte("version: 2\n")
	if _, err := secrets.Update(context.Background(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "replacement with the rotated cloud-init", func() (bool, string) {
		reqs := h.provider.CreateRequests()
		return len(reqs) == 2 && string(reqs[1].CloudInit) == "version: 2\n", fmt.Sprintf("%d create requests", len(reqs))
	})
	h.makeReady("p1")
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
	h.create(managed("p1"))
	h.makeReady("p1")

	h.update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.Provider = crawlv1alpha1.ProviderKubernetes })
	h.eventually(20*time.Second, "instance moved", func() (bool, string) {
		return len(h.provider.Instances()) == 0 && len(pods.Instances()) == 1,
			fmt.Sprintf("%d local and %d kubernetes instances", len(h.provider.Instances()), len(pods.Instances()))
	})
	p := h.makeReady("p1")
	if !strings.HasPrefix(p.Status.ProviderID, "kubernetes://") {
		t.Errorf("providerID %q does not name the new provider", p.Status.ProviderID)
	}
}

// TestCredentialsRotationReplacesInstance: instances are configured with the
// credentials, so a new password in the auth Secret replaces the instance.
func TestCredentialsRotationReplacesInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, harnessOptions{})
	secrets := h.kube.CoreV1().Secrets(h.ns)
	creds, err := secrets.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte("first")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := managed("p1")
	p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}
	h.create(p)
	h.makeReady("p1")
	hash := h.get("p1").Annotations[crawlv1alpha1.SpecHashAnnotation]

	creds.Data["password"] = []byte("second")
	if _, err := secrets.Update(context.Background(), creds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "replacement after the rotation", func() (bool, string) {
		return len(h.provider.CreateRequests()) == 2, fmt.Sprintf("%d create requests", len(h.provider.CreateRequests()))
	})
	got := h.makeReady("p1")
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
	h.create(managed("p1"))
	h.makeReady("p1")

	if err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "object gone", func() (bool, string) {
		_, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(context.Background(), "p1", metav1.GetOptions{})
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
	h.create(managed("p1"))
	h.eventually(20*time.Second, "QuotaExceeded", func() (bool, string) {
		p := h.get("p1")
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == controller.ReasonQuotaExceeded, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	fp.SetQuota(-1)
	h.makeReady("p1")
}

func TestPermanentErrorFailsUntilSpecChanges(t *testing.T) {
	t.Parallel()
	fp := fake.New()
	fp.FailNext(fake.OpCreate, provider.Permanent(fmt.Errorf("machine type does not exist")), 1)
	h := startController(t, harnessOptions{provider: fp, workers: 1})
	h.create(managed("p1"))
	p := h.waitForPhase("p1", crawlv1alpha1.PhaseFailed)
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); !strings.Contains(c.Message, "machine type does not exist") {
		t.Errorf("condition message %q does not carry the provider's reason", c.Message)
	}

	calls := len(fp.Calls())
	// Push the key through the queue several times, then a barrier: with one
	// worker the queue is FIFO, so once the barrier proxy has its status the
	// failed proxy's syncs have all run.
	for range 3 {
		h.health.ctrl.Enqueue(h.key("p1"))
	}
	h.create(external("barrier", 3128))
	h.eventually(10*time.Second, "barrier synced", func() (bool, string) {
		return h.get("barrier").Status.ObservedGeneration == 1, "no status yet"
	})
	if got := len(fp.Calls()); got != calls {
		t.Errorf("provider calls went from %d to %d while the proxy was Failed", calls, got)
	}

	h.update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To("fixed")} })
	h.makeReady("p1")
}

func TestManyProxiesConvergeUnderTransientErrors(t *testing.T) {
	t.Parallel()
	fp := fake.New(fake.WithProvisioningDelay(200 * time.Millisecond))
	fp.SetRandomFaults(0.3, []error{provider.ErrTransient}, 42)
	h := startController(t, harnessOptions{provider: fp})
	const n = 100
	for i := range n {
		h.create(managed(fmt.Sprintf("p%03d", i)))
	}
	h.eventually(2*time.Minute, "all provisioned", func() (bool, string) {
		list, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).List(context.Background(), metav1.ListOptions{})
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

	if err := h.crawl.CrawlV1alpha1().Proxies(h.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(2*time.Minute, "all deleted", func() (bool, string) {
		list, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).List(context.Background(), metav1.ListOptions{})
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
		h.create(external(fmt.Sprintf("x%03d", i), int32(20000+i)))
	}
	h.eventually(time.Minute, "endpoints recorded", func() (bool, string) {
		pending := 0
		for i := range n {
			if h.get(fmt.Sprintf("x%03d", i)).Status.Phase == crawlv1alpha1.PhasePending {
				pending++
			}
		}
		return pending == n, fmt.Sprintf("%d of %d Pending", pending, n)
	})
	for i := range n {
		h.health.set(h.key(fmt.Sprintf("x%03d", i)), fmt.Sprintf("127.0.0.1:%d", 20000+i), true)
	}
	h.eventually(time.Minute, "all Ready", func() (bool, string) {
		ready := 0
		for i := range n {
			if h.get(fmt.Sprintf("x%03d", i)).Status.Phase == crawlv1alpha1.PhaseReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	converged := h.writes.snapshot()
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
			h.health.ctrl.Enqueue(h.key(fmt.Sprintf("x%03d", i)))
		}
		resyncs.Add(1)
		return time.Now().After(deadline), nil
	})
	steady := h.writes.snapshot()
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
