package kubernetes_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv/kubelet"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

const waitTimeout = 30 * time.Second

// harness runs the real controller with the kubernetes provider against the
// real API server, in a namespace of its own (Pod Security "restricted"
// enforced), and the test kubelet for the Pods the provider creates.
type harness struct {
	*controllertest.Harness
	kubelet *kubelet.Kubelet
}

func start(t *testing.T) *harness {
	env := apiServer.Get(t)
	t.Helper()
	h := &harness{Harness: controllertest.Start(t, env.Config, controllertest.Options{
		NamespacePrefix: "podprov-",
		// The Pods must pass the strictest Pod Security level, enforced by
		// the API server's own admission.
		NamespaceLabels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{
			crawlv1alpha1.ProviderKubernetes: podprovider.New(kubernetes.NewForConfigOrDie(env.Config), podprovider.Options{DefaultImage: "forward-proxy:test"}),
		},
		Registry: provider.Registry{podprovider.Registration()},
	})}
	// Registered after the controller's cleanup, so it runs before it: the
	// proxies stop while the controller still runs.
	h.kubelet = kubelet.Start(h.Ctx, t, h.Kube, kubelet.Options{
		Namespace:     h.NS,
		LabelSelector: crawlv1alpha1.TagManagedBy + "=" + crawlv1alpha1.ManagedByValue,
	})
	return h
}

// secret creates a credentials Secret, marked for proxies.
func (h *harness) secret(name string, data map[string]string) {
	h.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}}, StringData: data}
	if _, err := h.Kube.CoreV1().Secrets(h.NS).Create(h.Ctx, s, metav1.CreateOptions{}); err != nil {
		h.T.Fatal(err)
	}
}

// waitProvisioned waits for the instance to run at an address other than
// the one given (the predecessor's, or "").
func (h *harness) waitProvisioned(name, notAt string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	var p *crawlv1alpha1.Proxy
	h.Eventually(waitTimeout, name+" provisioned", func() (bool, string) {
		p = h.Get(name)
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) && address(p) != notAt,
			fmt.Sprintf("at %q, conditions %+v", address(p), p.Status.Conditions)
	})
	return p
}

func (h *harness) waitProvisionedReason(name, reason string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	var p *crawlv1alpha1.Proxy
	h.Eventually(waitTimeout, name+" "+reason, func() (bool, string) {
		p = h.Get(name)
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
	h.T.Helper()
	p := h.Get(name)
	target := proxytest.StartHTTPTarget(h.T)
	ctx, cancel := context.WithTimeout(h.Ctx, 10*time.Second)
	defer cancel()
	began := time.Now()
	res, err := proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: address(p), User: user}, target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusNoContent {
		h.T.Fatalf("fetch through %s: status %d, err %v", address(p), res.Status, err)
	}
	h.Health.Set(h.Key(name), health.Verdict{Address: address(p), Healthy: true, Message: "probe through the proxy succeeded", Latency: time.Since(began), CheckedAt: time.Now()})
	h.Eventually(waitTimeout, name+" Ready", func() (bool, string) {
		p := h.Get(name)
		return p.Status.Phase == crawlv1alpha1.PhaseReady, fmt.Sprintf("phase %q", p.Status.Phase)
	})
}

// generatedCredentials reads the credentials the controller generated for
// the Proxy name (it has no spec.auth).
func (h *harness) generatedCredentials(name string) *url.Userinfo {
	h.T.Helper()
	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(h.Ctx, proxyaccess.GeneratedCredentialsSecret(h.Get(name)), metav1.GetOptions{})
	if err != nil {
		h.T.Fatalf("the generated credentials of %s: %v", name, err)
	}
	return url.UserPassword(string(secret.Data[crawlv1alpha1.AuthUsernameKey]), string(secret.Data[crawlv1alpha1.AuthPasswordKey]))
}

func (h *harness) pods() []corev1.Pod {
	h.T.Helper()
	list, err := h.Kube.CoreV1().Pods(h.NS).List(h.Ctx, metav1.ListOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return list.Items
}

func (h *harness) podUID(instance string) types.UID {
	h.T.Helper()
	pod, err := h.Kube.CoreV1().Pods(h.NS).Get(h.Ctx, instance, metav1.GetOptions{})
	if err != nil {
		h.T.Fatal(err)
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
	created := h.Create(podProxy("p1", withAuth("creds"), withCloudInit("#cloud-config\n# v1\n")))

	p := h.waitProvisioned("p1", "")
	instance := provider.InstanceName(created.UID)
	if want := provider.ProviderID("kubernetes", h.NS+"/"+instance); p.Status.ProviderID != want {
		t.Errorf("providerID %q, want %q", p.Status.ProviderID, want)
	}
	if !isLoopbackPodIP(p.Status.IP) || p.Status.Port != podprovider.DefaultPort {
		t.Errorf("status address %s: want 127.0.0.x (x ≥ 2) port %d", address(p), podprovider.DefaultPort)
	}
	running, ok := h.kubelet.Pod(h.NS, instance)
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
	created := h.Create(podProxy("p1", withCloudInit("v1")))
	instance := provider.InstanceName(created.UID)
	first := h.waitProvisioned("p1", "")
	firstUID := h.podUID(instance)

	began := time.Now()
	h.Update("p1", func(p *crawlv1alpha1.Proxy) {
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
	h.probeThrough("p1", h.generatedCredentials("p1"))

	h.Update("p1", withCloudInit("v2"))
	h.Eventually(waitTimeout, "a Pod with the new cloud-init", func() (bool, string) {
		running, ok := h.kubelet.Pod(h.NS, instance)
		return ok && running.UID != secondUID && string(running.Files[podprovider.CloudInitPath]) == "v2",
			fmt.Sprintf("running %v, UID %s", ok, running.UID)
	})
	h.waitProvisioned("p1", "")
	if pods := h.pods(); len(pods) != 1 || pods[0].UID == secondUID {
		t.Errorf("after the cloud-init change: %d Pods, want 1 new one", len(pods))
	}
	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(h.Ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data[podprovider.CloudInitKey]) != "v2" {
		t.Error("the cloud-init Secret does not hold the new content")
	}
	h.probeThrough("p1", h.generatedCredentials("p1"))
}

// TestDeleteProxyRemovesPodAndSecret: the Pod and the cloud-init Secret go,
// then the finalizer, then the object.
func TestDeleteProxyRemovesPodAndSecret(t *testing.T) {
	t.Parallel()
	h := start(t)
	created := h.Create(podProxy("p1", withCloudInit("v1")))
	instance := provider.InstanceName(created.UID)
	h.waitProvisioned("p1", "")

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(waitTimeout, "Proxy gone", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if pods := h.pods(); len(pods) != 0 {
		t.Errorf("%d Pods left", len(pods))
	}
	if _, err := h.Kube.CoreV1().Secrets(h.NS).Get(h.Ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
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
	h.Create(podProxy("p1"))
	p := h.waitProvisionedReason("p1", controller.ReasonQuotaExceeded)
	if p.Status.Phase != crawlv1alpha1.PhaseProvisioning {
		t.Errorf("phase %q while out of quota, want Provisioning", p.Status.Phase)
	}
	if pods := h.pods(); len(pods) != 0 {
		t.Fatalf("%d Pods despite the quota", len(pods))
	}

	h.setPodQuota(1)
	h.waitProvisioned("p1", "")
	h.probeThrough("p1", h.generatedCredentials("p1"))
}

// setPodQuota sets a ResourceQuota on the namespace's Pod count. It plays
// the quota controller too, which testenv does not run: the admission plugin
// refuses every Pod ("status unknown for quota") until status.hard and
// status.used are filled in.
func (h *harness) setPodQuota(pods int64) {
	h.T.Helper()
	quotas := h.Kube.CoreV1().ResourceQuotas(h.NS)
	hard := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		q, err := quotas.Get(h.Ctx, "pods", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			q, err = quotas.Create(h.Ctx, &corev1.ResourceQuota{
				ObjectMeta: metav1.ObjectMeta{Name: "pods"},
				Spec:       corev1.ResourceQuotaSpec{Hard: hard},
			}, metav1.CreateOptions{})
		} else if err == nil {
			q.Spec.Hard = hard
			q, err = quotas.Update(h.Ctx, q, metav1.UpdateOptions{})
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
		_, err = quotas.UpdateStatus(h.Ctx, q, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.T.Fatalf("setting the Pod quota: %v", err)
	}
}
