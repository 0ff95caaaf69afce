package hetzner_test

// Controller integration: the real controller against the real API server
// (pkg/testing/testenv), with the hetzner provider driving the real
// hcloud-go client against hcloudtest. In the Ready test each server boots
// our forward proxy from its own user-data (faultkit.BootForwardProxy),
// so "Ready" means a request went through the proxy the create configured.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/hetzner"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

type harness struct {
	*controllertest.Harness
	fake    *hcloudtest.Fake
	hetzner *hetzner.Provider
	target  string
}

// startController runs the controller with the hetzner provider against a
// fake made with opts.
func startController(t *testing.T, opts ...hcloudtest.Option) *harness {
	env := apiServer.Get(t)
	t.Helper()
	fake := hcloudtest.New(t, opts...)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	prov, err := hetzner.New(hetzner.Options{
		Token: hcloudtest.Token, ClusterID: clusterID, Location: "nbg1", Endpoint: fake.URL,
		RequestsPerSecond: 200, Burst: 50, RateLimitBackoff: 10 * time.Millisecond,
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{
			NamespacePrefix: "hetzner-",
			Workers:         2,
			Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderHetzner: prov},
			Registry:        provider.Registry{hetzner.Registration()},
		}),
		fake: fake, hetzner: prov, target: proxytest.StartHTTPTarget(t).URL,
	}
}

func (h *harness) hetznerProxy(name string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner:  &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}, Port: port},
		},
	}
}

// newCollector returns an orphan collector of the harness's provider with
// cfg's settings, its Proxy cache synced; the cache stops with the test.
func (h *harness) newCollector(t *testing.T, cfg gc.Config) *gc.Collector {
	t.Helper()
	return h.NewCollector(cfg, crawlv1alpha1.ProviderHetzner, h.hetzner)
}

// A Proxy becomes Ready on a server that runs the proxy its user-data
// configured: the request with the generated credentials goes through, one
// without them is refused. A spec change replaces the server; deleting
// the Proxy deletes the server.
func TestServerBootsFromUserDataAndIsReplacedOnSpecChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	h := startController(t, hcloudtest.WithSteps(2), hcloudtest.WithListLag(1),
		hcloudtest.WithPublicIP(func(n int) string { return fmt.Sprintf("127.0.103.%d", n) }),
		hcloudtest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	const port = 3171
	created := h.Create(h.hetznerProxy("p1", port))
	p := h.WaitProvisioned("p1")
	if !strings.HasPrefix(p.Status.ProviderID, "hetzner://") || p.Status.IP != "127.0.103.1" || p.Status.Port != port {
		t.Errorf("status providerID %q at %s:%d, want hetzner://… at 127.0.103.1:%d", p.Status.ProviderID, p.Status.IP, p.Status.Port, port)
	}
	h.RequireGeneratedCredentials(created, h.target)
	servers := h.fake.Servers()
	if len(servers) != 1 || servers[0].Labels[crawlv1alpha1.TagProxyUID] != string(created.UID) || servers[0].Location != "nbg1" {
		t.Fatalf("servers %+v: want one, the Proxy's, in nbg1", servers)
	}

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.Hetzner.ServerTypes = []string{"cpx11"} })
	h.Eventually(30*time.Second, "the replacement running", func() (bool, string) {
		p := h.Get("p1")
		servers := h.fake.Servers()
		return len(servers) == 1 && servers[0].ServerType == "cpx11" && servers[0].Status == "running" &&
				strings.HasSuffix(p.Status.ProviderID, fmt.Sprint(servers[0].ID)) &&
				meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("servers %+v, conditions %+v", servers, p.Status.Conditions)
	})
	if n := len(h.fake.Created()); n != 2 {
		t.Errorf("%d servers created, want 2 (the first and its replacement)", n)
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "Proxy gone and its server deleted", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(h.fake.Servers()) == 0, fmt.Sprintf("get: %v, servers %+v", err, h.fake.Servers())
	})
}

// A changed cloud-init Secret replaces the server: the new one carries the
// new user-data, the old one is deleted.
func TestServerIsReplacedOnCloudInitSecretChange(t *testing.T) {
	h := startController(t, hcloudtest.WithSteps(1))
	setUserData := func(doc string) { h.SetSecret("cloud-init", map[string]string{"user-data": doc}) }
	setUserData("#cloud-config\n# v1\n")
	spec := h.hetznerProxy("p1", 3128)
	spec.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "cloud-init", Key: "user-data"}}
	h.Create(spec)
	first := h.WaitProvisioned("p1").Status.ProviderID

	setUserData("#cloud-config\n# v2\n")
	h.Eventually(30*time.Second, "a replacement from the new Secret", func() (bool, string) {
		p := h.Get("p1")
		servers := h.fake.Servers()
		return p.Status.ProviderID != first && len(servers) == 1 && strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", servers[0].ID)) &&
				strings.Contains(servers[0].UserData, "# v2") && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("providerID %s, servers %v, conditions %+v", p.Status.ProviderID, servers, p.Status.Conditions)
	})
	if all := h.fake.Created(); len(all) != 2 || !strings.Contains(all[0].UserData, "# v1") {
		t.Errorf("%d servers created, want 2, the first from v1", len(all))
	}
}

// The operator stops between the create and the status write; the next
// one creates again and ends on the same server: exactly one.
func TestOperatorStoppedBetweenCreateAndStatusWriteMakesOneServer(t *testing.T) {
	h := startController(t)
	p := h.ProvisionThroughCrash(apiServer.Get(t).Config, crawlv1alpha1.ProviderHetzner, h.hetzner, h.hetznerProxy("p1", 3128))
	created := h.fake.Created()
	if len(created) != 1 || !strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", created[0].ID)) {
		t.Errorf("%d servers created %v, status %q: want the one server, adopted", len(created), created, p.Status.ProviderID)
	}
}
