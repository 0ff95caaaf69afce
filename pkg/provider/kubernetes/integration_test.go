package kubernetes_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testenv"
	"github.com/proxyfleet/proxy-operator/pkg/testenv/kubelet"
)

var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, &env) }

const waitTimeout = 30 * time.Second

// testHealth plays the health engine: the tests probe through the proxy
// themselves and report the verdict.
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

func (h *testHealth) report(key cache.ObjectName, addr string, latency time.Duration) {
	h.mu.Lock()
	h.verdicts[key] = controller.HealthVerdict{Address: addr, Healthy: true, Message: "probe through the proxy succeeded", Latency: latency, CheckedAt: time.Now()}
	h.mu.Unlock()
	h.ctrl.Enqueue(key)
}

// harness runs the real controller with the kubernetes provider against the
// real API server, in a namespace of its own (Pod Security "restricted"
// enforced), and the test kubelet for the Pods the provider creates.
type harness struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	crawl   versioned.Interface
	kube    kubernetes.Interface
	health  *testHealth
	kubelet *kubelet.Kubelet
}

func start(t *testing.T) *harness {
	t.Helper()
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	h := &harness{
		t: t, ctx: ctx,
		crawl:  versioned.NewForConfigOrDie(env.Config),
		kube:   kubernetes.NewForConfigOrDie(env.Config),
		health: &testHealth{verdicts: map[cache.ObjectName]controller.HealthVerdict{}},
	}
	ns, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "podprov-",
		// The Pods must pass the strictest Pod Security level, enforced by
		// the API server's own admission.
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.ns = ns.Name

	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(h.crawl, 0, crawlinformers.WithNamespace(h.ns))
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(h.kube, 0, kubeinformers.WithNamespace(h.ns))
	ctrl, err := controller.NewController(controller.Config{
		CrawlClient:    h.crawl,
		KubeClient:     h.kube,
		ProxyInformer:  crawlFactory.Crawl().V1alpha1().Proxies(),
		SecretInformer: kubeFactory.Core().V1().Secrets(),
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{
			crawlv1alpha1.ProviderKubernetes: podprovider.New(h.kube, podprovider.Options{DefaultImage: "forward-proxy:test"}),
		},
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
	go func() { runDone <- ctrl.Run(ctx, 3) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("controller.Run: %v", err)
		}
		crawlFactory.Shutdown()
		kubeFactory.Shutdown()
	})
	// Registered after the controller's cleanup, so it runs before it: the
	// proxies stop while the controller still runs.
	h.kubelet = kubelet.Start(ctx, t, h.kube, kubelet.Options{
		Namespace:     h.ns,
		LabelSelector: crawlv1alpha1.TagManagedBy + "=" + crawlv1alpha1.ManagedByValue,
	})
	return h
}

func (h *harness) key(name string) cache.ObjectName { return cache.NewObjectName(h.ns, name) }

func (h *harness) create(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	h.t.Helper()
	p.Namespace = h.ns
	created, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Create(h.ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return created
}

func (h *harness) get(name string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	p, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) update(name string, change func(*crawlv1alpha1.Proxy)) {
	h.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		_, err = h.crawl.CrawlV1alpha1().Proxies(h.ns).Update(h.ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.t.Fatalf("updating %s: %v", name, err)
	}
}

func (h *harness) secret(name string, data map[string]string) {
	h.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	if _, err := h.kube.CoreV1().Secrets(h.ns).Create(h.ctx, s, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// eventually polls cond until it holds; the last message explains a failure.
func (h *harness) eventually(what string, cond func() (bool, string)) {
	h.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(h.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		h.t.Fatalf("%s: not within %s: %s", what, waitTimeout, last)
	}
}

// waitProvisioned waits for the instance to run at an address other than
// the one given (the predecessor's, or "").
func (h *harness) waitProvisioned(name, notAt string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	var p *crawlv1alpha1.Proxy
	h.eventually(name+" provisioned", func() (bool, string) {
		p = h.get(name)
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) && address(p) != notAt,
			fmt.Sprintf("at %q, conditions %+v", address(p), p.Status.Conditions)
	})
	return p
}

func (h *harness) waitProvisionedReason(name, reason string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	var p *crawlv1alpha1.Proxy
	h.eventually(name+" "+reason, func() (bool, string) {
		p = h.get(name)
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == reason, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	return p
}

func address(p *crawlv1alpha1.Proxy) string {
	if p.Status.IP == "" {
		return ""
	}
	return net.JoinHostPort(p.Status.IP, strconv.Itoa(int(p.Status.Port)))
}

// probeThrough fetches a loopback target through the proxy at the Proxy's
// status address, reports the verdict, and waits for phase Ready.
func (h *harness) probeThrough(name string, user *url.Userinfo) {
	h.t.Helper()
	p := h.get(name)
	target := proxytest.StartHTTPTarget(h.t)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	began := time.Now()
	res, err := proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: address(p), User: user}, target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusNoContent {
		h.t.Fatalf("fetch through %s: status %d, err %v", address(p), res.Status, err)
	}
	h.health.report(h.key(name), address(p), time.Since(began))
	h.eventually(name+" Ready", func() (bool, string) {
		p := h.get(name)
		return p.Status.Phase == crawlv1alpha1.PhaseReady, fmt.Sprintf("phase %q", p.Status.Phase)
	})
}

func (h *harness) pods() []corev1.Pod {
	h.t.Helper()
	list, err := h.kube.CoreV1().Pods(h.ns).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return list.Items
}

func (h *harness) podUID(instance string) types.UID {
	h.t.Helper()
	pod, err := h.kube.CoreV1().Pods(h.ns).Get(h.ctx, instance, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pod.UID
}

func podProxy(name string, opts ...func(*crawlv1alpha1.Proxy)) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderKubernetes},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withCloudInit(content string) func(*crawlv1alpha1.Proxy) {
	return func(p *crawlv1alpha1.Proxy) { p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To(content)} }
}

func withAuth(secret string) func(*crawlv1alpha1.Proxy) {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

func isLoopbackPodIP(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Is4() && a.IsLoopback() && a != netip.MustParseAddr("127.0.0.1")
}

// TestProxyRunsAsPod: Proxy → Pod (passing Pod Security "restricted") →
// Running at the Pod's 127.0.0.x, serving with the credentials of the
// Proxy's auth Secret and the cloud-init mounted where --cloud-init says.
func TestProxyRunsAsPod(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.secret("creds", map[string]string{crawlv1alpha1.AuthUsernameKey: "crawler", crawlv1alpha1.AuthPasswordKey: "s3cret"})
	created := h.create(podProxy("p1", withAuth("creds"), withCloudInit("#cloud-config\n# v1\n")))

	p := h.waitProvisioned("p1", "")
	instance := provider.InstanceName(created.UID)
	if want := provider.ProviderID("kubernetes", h.ns+"/"+instance); p.Status.ProviderID != want {
		t.Errorf("providerID %q, want %q", p.Status.ProviderID, want)
	}
	if !isLoopbackPodIP(p.Status.IP) || p.Status.Port != podprovider.DefaultPort {
		t.Errorf("status address %s: want 127.0.0.x (x ≥ 2) port %d", address(p), podprovider.DefaultPort)
	}
	running, ok := h.kubelet.Pod(h.ns, instance)
	if !ok || running.Addr != address(p) {
		t.Fatalf("the kubelet runs %+v (%v), want it at %s", running, ok, address(p))
	}
	if got := string(running.Files[podprovider.CloudInitPath]); got != "#cloud-config\n# v1\n" {
		t.Errorf("the Pod's %s holds %d bytes, not the cloud-init", podprovider.CloudInitPath, len(got))
	}

	h.probeThrough("p1", url.UserPassword("crawler", "s3cret"))
}

// TestSpecChangeReplacesPod: a changed port, then a changed cloud-init, each
// replace the Pod: a new UID, the old Pod gone, exactly one Pod, and the
// new cloud-init in the Pod's Secret.
func TestSpecChangeReplacesPod(t *testing.T) {
	t.Parallel()
	h := start(t)
	created := h.create(podProxy("p1", withCloudInit("v1")))
	instance := provider.InstanceName(created.UID)
	first := h.waitProvisioned("p1", "")
	firstUID := h.podUID(instance)

	began := time.Now()
	h.update("p1", func(p *crawlv1alpha1.Proxy) {
		p.Spec.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 3129}
	})
	second := h.waitProvisioned("p1", address(first))
	t.Logf("port changed → the replacement Provisioned=True at %s in %v", address(second), time.Since(began))
	if second.Status.Port != 3129 {
		t.Errorf("port %d after the change, want 3129", second.Status.Port)
	}
	secondUID := h.podUID(instance)
	if secondUID == firstUID {
		t.Fatal("the Pod was not replaced")
	}
	if pods := h.pods(); len(pods) != 1 {
		t.Errorf("%d Pods after the replacement, want 1", len(pods))
	}
	h.probeThrough("p1", nil)

	h.update("p1", withCloudInit("v2"))
	h.eventually("a Pod with the new cloud-init", func() (bool, string) {
		running, ok := h.kubelet.Pod(h.ns, instance)
		return ok && running.UID != secondUID && string(running.Files[podprovider.CloudInitPath]) == "v2",
			fmt.Sprintf("running %v, UID %s", ok, running.UID)
	})
	h.waitProvisioned("p1", "")
	if pods := h.pods(); len(pods) != 1 || pods[0].UID == secondUID {
		t.Errorf("after the cloud-init change: %d Pods, want 1 new one", len(pods))
	}
	secret, err := h.kube.CoreV1().Secrets(h.ns).Get(h.ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data[podprovider.CloudInitKey]) != "v2" {
		t.Error("the cloud-init Secret does not hold the new content")
	}
	h.probeThrough("p1", nil)
}

// TestDeleteProxyRemovesPodAndSecret: the Pod and the cloud-init Secret go,
// then the finalizer, then the object.
func TestDeleteProxyRemovesPodAndSecret(t *testing.T) {
	t.Parallel()
	h := start(t)
	created := h.create(podProxy("p1", withCloudInit("v1")))
	instance := provider.InstanceName(created.UID)
	h.waitProvisioned("p1", "")

	if err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Delete(h.ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("Proxy gone", func() (bool, string) {
		_, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(h.ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if pods := h.pods(); len(pods) != 0 {
		t.Errorf("%d Pods left", len(pods))
	}
	if _, err := h.kube.CoreV1().Secrets(h.ns).Get(h.ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cloud-init Secret: %v, want NotFound", err)
	}
	if running := h.kubelet.Pods(); len(running) != 0 {
		t.Errorf("the kubelet still runs %+v", running)
	}
}

// TestQuotaExceededThenRunning: a ResourceQuota of 0 Pods makes the Proxy
// QuotaExceeded; raising it lets the retry create the Pod.
func TestQuotaExceededThenRunning(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.setPodQuota(0)
	h.create(podProxy("p1"))
	p := h.waitProvisionedReason("p1", controller.ReasonQuotaExceeded)
	if p.Status.Phase != crawlv1alpha1.PhaseProvisioning {
		t.Errorf("phase %q while out of quota, want Provisioning", p.Status.Phase)
	}
	if pods := h.pods(); len(pods) != 0 {
		t.Fatalf("%d Pods despite the quota", len(pods))
	}

	h.setPodQuota(1)
	h.waitProvisioned("p1", "")
	h.probeThrough("p1", nil)
}

// setPodQuota sets a ResourceQuota on the namespace's Pod count. It plays
// the quota controller too, which testenv does not run: the admission plugin
// refuses every Pod ("status unknown for quota") until status.hard and
// status.used are filled in.
func (h *harness) setPodQuota(pods int64) {
	h.t.Helper()
	quotas := h.kube.CoreV1().ResourceQuotas(h.ns)
	hard := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		q, err := quotas.Get(h.ctx, "pods", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			q, err = quotas.Create(h.ctx, &corev1.ResourceQuota{
				ObjectMeta: metav1.ObjectMeta{Name: "pods"},
				Spec:       corev1.ResourceQuotaSpec{Hard: hard},
			}, metav1.CreateOptions{})
		} else if err == nil {
			q.Spec.Hard = hard
			q, err = quotas.Update(h.ctx, q, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		used := int64(0)
		for _, pod := range h.pods() {
			if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				used++
			}
		}
		q.Status.Hard = hard
		q.Status.Used = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(used, resource.DecimalSI)}
		_, err = quotas.UpdateStatus(h.ctx, q, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.t.Fatalf("setting the Pod quota: %v", err)
	}
}
