package digitalocean_test

// Controller integration: the real controller against the real API server
// (pkg/testing/testenv), with the digitalocean provider driving the real
// godo client against dotest. In the Ready test each droplet boots our
// forward proxy from its own user-data (faultkit.BootForwardProxy), so
// "Ready" means a request went through the proxy the create configured.

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
	"github.com/proxyfleet/proxy-operator/pkg/provider/digitalocean"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

type harness struct {
	*controllertest.Harness
	fake   *dotest.Fake
	do     *digitalocean.Provider
	target string
}

// startController runs the controller with the digitalocean provider
// against a fake made with opts.
func startController(t *testing.T, opts ...dotest.Option) *harness {
	env := apiServer.Get(t)
	t.Helper()
	fake := dotest.New(t, opts...)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	prov, err := digitalocean.New(digitalocean.Options{
		Token: dotest.Token, ClusterID: clusterID, Region: "fra1", Endpoint: fake.URL,
		RequestsPerSecond: 200, Burst: 50, RateLimitBackoff: 10 * time.Millisecond, SettleTime: 5 * time.Second,
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{
			NamespacePrefix: "digitalocean-",
			Workers:         2,
			Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderDigitalOcean: prov},
			Registry:        provider.Registry{digitalocean.Registration()},
		}),
		fake: fake, do: prov, target: proxytest.StartHTTPTarget(t).URL,
	}
}

func (h *harness) dropletProxy(name string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider:     crawlv1alpha1.ProviderDigitalOcean,
			DigitalOcean: &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{"s-1vcpu-512mb-10gb"}, Port: port},
		},
	}
}

// newCollector returns an orphan collector of the harness's provider with
// cfg's settings, its Proxy cache synced; the cache stops with the test.
func (h *harness) newCollector(t *testing.T, cfg gc.Config) *gc.Collector {
	t.Helper()
	return h.NewCollector(cfg, crawlv1alpha1.ProviderDigitalOcean, h.do)
}

// A Proxy becomes Ready on a droplet that runs the proxy its user-data
// configured: the request with the generated credentials goes through, one
// without them is refused. A spec change replaces the droplet; deleting
// the Proxy deletes the droplet.
func TestDropletBootsFromUserDataAndIsReplacedOnSpecChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	h := startController(t, dotest.WithSteps(2), dotest.WithListLag(1),
		dotest.WithPublicIP(func(n int) string { return fmt.Sprintf("127.0.105.%d", n) }),
		dotest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	const port = 3171
	created := h.Create(h.dropletProxy("p1", port))
	p := h.WaitProvisioned("p1")
	if !strings.HasPrefix(p.Status.ProviderID, "digitalocean://") || p.Status.IP != "127.0.105.1" || p.Status.Port != port {
		t.Errorf("status providerID %q at %s:%d, want digitalocean://… at 127.0.105.1:%d", p.Status.ProviderID, p.Status.IP, p.Status.Port, port)
	}
	h.RequireGeneratedCredentials(created, h.target)
	droplets := h.fake.Droplets()
	if len(droplets) != 1 || !droplets[0].HasTag("pxo:proxy-uid:"+string(created.UID)) || droplets[0].Region != "fra1" {
		t.Fatalf("droplets %+v: want one, the Proxy's, in fra1", droplets)
	}

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.DigitalOcean.Sizes = []string{"s-1vcpu-1gb"} })
	h.Eventually(30*time.Second, "the replacement running", func() (bool, string) {
		p := h.Get("p1")
		droplets := h.fake.Droplets()
		return len(droplets) == 1 && droplets[0].Size == "s-1vcpu-1gb" && droplets[0].Status == "active" &&
				strings.HasSuffix(p.Status.ProviderID, fmt.Sprint(droplets[0].ID)) &&
				meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("droplets %+v, conditions %+v", droplets, p.Status.Conditions)
	})
	if n := len(h.fake.Created()); n != 2 {
		t.Errorf("%d droplets created, want 2 (the first and its replacement)", n)
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "Proxy gone and its droplet deleted", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(h.fake.Droplets()) == 0, fmt.Sprintf("get: %v, droplets %+v", err, h.fake.Droplets())
	})
}

// A changed cloud-init Secret replaces the droplet: the new one carries the
// new user-data, the old one is deleted.
func TestDropletIsReplacedOnCloudInitSecretChange(t *testing.T) {
	h := startController(t, dotest.WithSteps(1))
	setUserData := func(doc string) { h.SetSecret("cloud-init", map[string]string{"user-data": doc}) }
	setUserData("#cloud-config\n# v1\n")
	spec := h.dropletProxy("p1", 3128)
	spec.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "cloud-init", Key: "user-data"}}
	h.Create(spec)
	first := h.WaitProvisioned("p1").Status.ProviderID

	setUserData("#cloud-config\n# v2\n")
	h.Eventually(30*time.Second, "a replacement from the new Secret", func() (bool, string) {
		p := h.Get("p1")
		droplets := h.fake.Droplets()
		return p.Status.ProviderID != first && len(droplets) == 1 && strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", droplets[0].ID)) &&
				strings.Contains(droplets[0].UserData, "# v2") && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("providerID %s, droplets %v, conditions %+v", p.Status.ProviderID, droplets, p.Status.Conditions)
	})
	if all := h.fake.Created(); len(all) != 2 || !strings.Contains(all[0].UserData, "# v1") {
		t.Errorf("%d droplets created, want 2, the first from v1", len(all))
	}
}

// The operator stops between the create and the status write; the next
// one creates again, finds the droplet by its key tag and adopts it:
// exactly one.
func TestOperatorStoppedBetweenCreateAndStatusWriteMakesOneDroplet(t *testing.T) {
	h := startController(t)
	p := h.ProvisionThroughCrash(apiServer.Get(t).Config, crawlv1alpha1.ProviderDigitalOcean, h.do, h.dropletProxy("p1", 3128))
	created := h.fake.Created()
	if len(created) != 1 || !strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", created[0].ID)) {
		t.Errorf("%d droplets created %v, status %q: want the one droplet, adopted", len(created), created, p.Status.ProviderID)
	}
}
