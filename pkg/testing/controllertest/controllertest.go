// Package controllertest holds test helpers that run the real controller
// in-process against a real API server (pkg/testing/testenv): a namespace of its own,
// informers scoped to it, the providers a test chooses and a health source
// the test drives. It is used only by tests; nothing in the operator imports
// it, and it holds no assertions of its own beyond failing on plumbing errors.
package controllertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// Options choose what the harness runs. The zero value of a field means the
// default given in its comment.
type Options struct {
	// Providers are registered with the controller as they are.
	Providers map[crawlv1alpha1.ProviderName]provider.Provider
	// ProvidersWithSecrets, when set, is called with the Secret lister of the
	// controller's own informer and its result added to Providers: for
	// providers that read Secrets as the operator wires them.
	ProvidersWithSecrets func(corelisters.SecretLister) map[crawlv1alpha1.ProviderName]provider.Provider
	// Registry declares the providers whose spec blocks the spec hash
	// covers (controller.Config.Registry): a suite that changes a block
	// and expects a new instance passes its provider's Registration. Nil:
	// no block is hashed.
	Registry provider.Registry

	// Namespace, when set, is an existing namespace to run in; otherwise a
	// new one is created with NamespacePrefix (default "ctrl-") and
	// NamespaceLabels.
	Namespace       string
	NamespacePrefix string
	NamespaceLabels map[string]string

	// Workers is the controller's worker count (default 3).
	Workers int
	// Polls of the controller (defaults 100ms, 100ms, 1s, 300ms).
	ProvisioningPoll, DeletionPoll, DriftPoll, QuotaRetry time.Duration
	// Health, when set, replaces the default TestHealth (Harness.Health is
	// then nil).
	Health controller.HealthSource
}

// Harness is a running controller and the clients a test uses around it.
type Harness struct {
	T *testing.T
	// Ctx carries the test's logger; it is cancelled when the harness stops.
	Ctx context.Context
	// NS is the namespace everything runs in.
	NS string
	// Crawl and Kube are admin clients for the test's own reads and writes.
	Crawl versioned.Interface
	Kube  kubernetes.Interface
	// Ctrl is the running controller.
	Ctrl *controller.Controller
	// Health is the settable health source (nil when Options.Health is set).
	Health *TestHealth
	// Writes counts the controller's writes to Proxy objects.
	Writes *WriteCounter

	stopOnce sync.Once
	stop     func()
}

// Start runs a controller against the API server at cfg until the test ends
// (or Stop).
func Start(t *testing.T, cfg *rest.Config, opts Options) *Harness {
	t.Helper()
	if opts.Workers == 0 {
		opts.Workers = 3
	}
	if opts.NamespacePrefix == "" {
		opts.NamespacePrefix = "ctrl-"
	}
	opts.ProvisioningPoll = orDefault(opts.ProvisioningPoll, 100*time.Millisecond)
	opts.DeletionPoll = orDefault(opts.DeletionPoll, 100*time.Millisecond)
	opts.DriftPoll = orDefault(opts.DriftPoll, time.Second)
	opts.QuotaRetry = orDefault(opts.QuotaRetry, 300*time.Millisecond)

	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	h := &Harness{
		T: t, Ctx: ctx,
		Crawl:  versioned.NewForConfigOrDie(cfg),
		Kube:   kubernetes.NewForConfigOrDie(cfg),
		Writes: &WriteCounter{byName: map[string]int{}},
		NS:     opts.Namespace,
	}
	if h.NS == "" {
		ns, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			GenerateName: opts.NamespacePrefix,
			Labels:       opts.NamespaceLabels,
		}}, metav1.CreateOptions{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		h.NS = ns.Name
	}

	opCfg := rest.CopyConfig(cfg)
	opCfg.QPS, opCfg.Burst = 200, 400
	opCfg.Wrap(h.Writes.wrap)
	operatorCrawl := versioned.NewForConfigOrDie(opCfg)
	operatorKube := kubernetes.NewForConfigOrDie(opCfg)
	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(operatorCrawl, 0, crawlinformers.WithNamespace(h.NS))
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(operatorKube, 0, kubeinformers.WithNamespace(h.NS))
	secrets := kubeFactory.Core().V1().Secrets()

	providers := map[crawlv1alpha1.ProviderName]provider.Provider{}
	for name, p := range opts.Providers {
		providers[name] = p
	}
	if opts.ProvidersWithSecrets != nil {
		for name, p := range opts.ProvidersWithSecrets(secrets.Lister()) {
			providers[name] = p
		}
	}
	verdicts := opts.Health
	if verdicts == nil {
		h.Health = &TestHealth{verdicts: map[cache.ObjectName]health.Verdict{}}
		verdicts = h.Health
	}
	ctrl, err := controller.NewController(controller.Config{
		CrawlClient:      operatorCrawl,
		KubeClient:       operatorKube,
		ProxyInformer:    crawlFactory.Crawl().V1alpha1().Proxies(),
		SecretInformer:   secrets,
		Providers:        providers,
		Registry:         opts.Registry,
		Health:           verdicts,
		ProvisioningPoll: opts.ProvisioningPoll,
		DeletionPoll:     opts.DeletionPoll,
		DriftPoll:        opts.DriftPoll,
		QuotaRetry:       opts.QuotaRetry,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h.Ctrl = ctrl
	if h.Health != nil {
		h.Health.ctrl = ctrl
	}
	crawlFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	runDone := make(chan error, 1)
	go func() { runDone <- ctrl.Run(ctx, opts.Workers) }()
	h.stop = func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("controller.Run: %v", err)
		}
		crawlFactory.Shutdown()
		kubeFactory.Shutdown()
	}
	t.Cleanup(h.Stop)
	return h
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Stop cancels the controller and waits for it; the provider's instances
// stay. It runs at the test's end anyway; calling it again does nothing.
func (h *Harness) Stop() { h.stopOnce.Do(h.stop) }

// Key names a Proxy in the harness's namespace.
func (h *Harness) Key(name string) cache.ObjectName { return cache.NewObjectName(h.NS, name) }

// Create creates p in the harness's namespace.
func (h *Harness) Create(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	h.T.Helper()
	p.Namespace = h.NS
	created, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Create(h.Ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return created
}

// Get reads the stored Proxy name.
func (h *Harness) Get(name string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return p
}

// Update applies change to the stored object, retrying on conflicts with the
// controller's own writes.
func (h *Harness) Update(name string, change func(*crawlv1alpha1.Proxy)) {
	h.T.Helper()
	err := wait.PollUntilContextTimeout(h.Ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(p)
		_, err = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Update(ctx, p, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		h.T.Fatalf("updating %s: %v", name, err)
	}
}

// Eventually polls cond until it holds or timeout passes; the message of the
// last attempt explains a failure.
func (h *Harness) Eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	h.T.Helper()
	eventually.Check(h.T, timeout, 50*time.Millisecond, what, eventually.Holds(cond))
}

// WaitForPhase waits up to 20s for the Proxy to reach phase.
func (h *Harness) WaitForPhase(name string, phase crawlv1alpha1.ProxyPhase) *crawlv1alpha1.Proxy {
	h.T.Helper()
	var p *crawlv1alpha1.Proxy
	h.Eventually(20*time.Second, name+" phase "+string(phase), func() (bool, string) {
		p = h.Get(name)
		return p.Status.Phase == phase, fmt.Sprintf("phase %q, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	return p
}

// MakeReady waits for the instance to run, reports it healthy through the
// TestHealth (Verdict: latency 3ms), and waits for phase Ready.
func (h *Harness) MakeReady(name string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	h.Eventually(20*time.Second, name+" provisioned", func() (bool, string) {
		p := h.Get(name)
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	p := h.Get(name)
	h.Health.Set(h.Key(name), Verdict(fmt.Sprintf("%s:%d", p.Status.IP, p.Status.Port), true))
	return h.WaitForPhase(name, crawlv1alpha1.PhaseReady)
}

// TestHealth plays the health engine: tests set verdicts, and each Set
// pushes the key through the controller's queue.
type TestHealth struct {
	mu       sync.Mutex
	verdicts map[cache.ObjectName]health.Verdict
	ctrl     *controller.Controller
}

// Verdict implements controller.HealthSource.
func (h *TestHealth) Verdict(key cache.ObjectName) (health.Verdict, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.verdicts[key]
	return v, ok
}

// Set records v for key and enqueues key.
func (h *TestHealth) Set(key cache.ObjectName, v health.Verdict) {
	h.mu.Lock()
	h.verdicts[key] = v
	h.mu.Unlock()
	h.ctrl.Enqueue(key)
}

// Verdict is a canned verdict about addr, checked now, with 3ms latency.
func Verdict(addr string, healthy bool) health.Verdict {
	return health.Verdict{Address: addr, Healthy: healthy, Message: "test verdict", Latency: 3 * time.Millisecond, CheckedAt: time.Now()}
}

// WriteCounter counts the controller's writes to Proxy objects, per object.
type WriteCounter struct {
	mu     sync.Mutex
	byName map[string]int
}

func (w *WriteCounter) wrap(rt http.RoundTripper) http.RoundTripper {
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

// Snapshot returns the writes so far, by Proxy name.
func (w *WriteCounter) Snapshot() map[string]int {
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
