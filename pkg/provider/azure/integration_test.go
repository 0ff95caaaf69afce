package azure_test

// Controller integration: the real controller against the real API server
// (pkg/testing/testenv), with the azure provider driving the real SDK
// (azidentity, armcompute, armnetwork) against azuretest over TLS. In the
// Ready test each VM boots our forward proxy from its own custom data
// (faultkit.BootForwardProxy), so "Ready" means a request went through
// the proxy the create configured.

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
	"github.com/proxyfleet/proxy-operator/pkg/provider/azure"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/azuretest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

type harness struct {
	*controllertest.Harness
	fake   *azuretest.Fake
	az     *azure.Provider
	target string
}

// startController runs the controller with the azure provider against a
// fake made with opts.
func startController(t *testing.T, opts ...azuretest.Option) *harness {
	env := apiServer.Get(t)
	t.Helper()
	fake := azuretest.New(t, opts...)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	prov, err := azure.New(azure.Options{
		Credential: fake.Credential(t), SubscriptionID: azuretest.SubscriptionID, ResourceGroup: azuretest.ResourceGroup,
		ClusterID: clusterID, Location: "westeurope", SubnetID: azuretest.SubnetID, Endpoint: fake.URL, Transport: fake.Transport(),
		RequestsPerSecond: 200, Burst: 50, RateLimitBackoff: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{
			NamespacePrefix: "azure-",
			Workers:         2,
			Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderAzure: prov},
			Registry:        provider.Registry{azure.Registration()},
		}),
		fake: fake, az: prov, target: proxytest.StartHTTPTarget(t).URL,
	}
}

func (h *harness) vmProxy(name string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderAzure,
			Azure:    &crawlv1alpha1.AzureProvider{VMSizes: []string{"Standard_B1s"}, Port: port},
		},
	}
}

// newCollector returns an orphan collector of the harness's provider with
// cfg's settings, its Proxy cache synced; the cache stops with the test.
func (h *harness) newCollector(t *testing.T, cfg gc.Config) *gc.Collector {
	t.Helper()
	return h.NewCollector(cfg, crawlv1alpha1.ProviderAzure, h.az)
}

// A Proxy becomes Ready on a VM that runs the proxy its custom data
// configured: the request with the generated credentials goes through,
// one without them is refused. A spec change replaces the VM; deleting the
// Proxy deletes the VM, its NIC and its public IP.
func TestVMBootsFromCustomDataAndIsReplacedOnSpecChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	h := startController(t, azuretest.WithSteps(2), azuretest.WithGetLag(1),
		azuretest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	const port = 3172
	created := h.Create(h.vmProxy("p1", port))
	p := h.WaitProvisioned("p1")
	vms := h.fake.VMs()
	if len(vms) != 1 || p.Status.ProviderID != "azure://"+vms[0].Name || p.Status.IP != vms[0].PublicIP || p.Status.Port != port {
		t.Fatalf("status providerID %q at %s:%d, VMs %v: want azure://<the one VM> at its public IP", p.Status.ProviderID, p.Status.IP, p.Status.Port, vms)
	}
	h.RequireGeneratedCredentials(created, h.target)
	if vms[0].Tags["pxo-proxy-uid"] != string(created.UID) || vms[0].Location != "westeurope" {
		t.Fatalf("VM %v: want the Proxy's, in westeurope", vms[0])
	}

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.Azure.VMSizes = []string{"Standard_B1ms"} })
	h.Eventually(30*time.Second, "the replacement running", func() (bool, string) {
		p := h.Get("p1")
		vms := h.fake.VMs()
		return len(vms) == 1 && vms[0].Size == "Standard_B1ms" && vms[0].State == "Succeeded" &&
				p.Status.ProviderID == "azure://"+vms[0].Name && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("VMs %v, conditions %+v", vms, p.Status.Conditions)
	})
	if n := len(h.fake.Created()); n != 2 {
		t.Errorf("%d VMs created, want 2 (the first and its replacement)", n)
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "Proxy gone and its VM, NIC and public IP deleted", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(h.fake.Resources()) == 0, fmt.Sprintf("get: %v, resources %v", err, h.fake.Resources())
	})
}

// A changed cloud-init Secret replaces the VM: the new one carries the new
// custom data, the old one is deleted.
func TestVMIsReplacedOnCloudInitSecretChange(t *testing.T) {
	h := startController(t, azuretest.WithSteps(1))
	setUserData := func(doc string) { h.SetSecret("cloud-init", map[string]string{"user-data": doc}) }
	setUserData("#cloud-config\n# v1\n")
	spec := h.vmProxy("p1", 3128)
	spec.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "cloud-init", Key: "user-data"}}
	h.Create(spec)
	first := h.WaitProvisioned("p1").Status.ProviderID
	setUserData("#cloud-config\n# v2\n")
	h.Eventually(30*time.Second, "a replacement from the new Secret", func() (bool, string) {
		p := h.Get("p1")
		vms := h.fake.VMs()
		return p.Status.ProviderID != first && len(vms) == 1 && p.Status.ProviderID == "azure://"+vms[0].Name &&
				strings.Contains(vms[0].UserData, "# v2") && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("providerID %s, VMs %v, conditions %+v", p.Status.ProviderID, vms, p.Status.Conditions)
	})
	if all := h.fake.Created(); len(all) != 2 || !strings.Contains(all[0].UserData, "# v1") {
		t.Errorf("%d VMs created, want 2, the first from v1", len(all))
	}
}

// The operator stops between the create and the status write; the next
// one creates again, PUTs the same names and adopts the VM: exactly one.
func TestOperatorStoppedBetweenCreateAndStatusWriteMakesOneVM(t *testing.T) {
	h := startController(t)
	p := h.ProvisionThroughCrash(apiServer.Get(t).Config, crawlv1alpha1.ProviderAzure, h.az, h.vmProxy("p1", 3128))
	created := h.fake.Created()
	if len(created) != 1 || p.Status.ProviderID != "azure://"+created[0].Name {
		t.Errorf("%d VMs created %v, status %q: want the one VM, adopted", len(created), created, p.Status.ProviderID)
	}
}
