package gce_test

// Controller integration: the real controller against the real API server
// (pkg/testing/testenv), with the gce provider talking to the in-process fake
// Compute API. The fake's external IPs are 127.0.0.x addresses where the
// tests run a real forward proxy, so "Ready" means a request went through it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

const defaultZone = "test-zone-a"

type harness struct {
	*controllertest.Harness
	fake   *gcetest.Server
	gce    *gce.Provider
	target string
}

// startController runs the controller with the gce provider against fake,
// in a namespace of its own.
func startController(t *testing.T, fake *gcetest.Server) *harness {
	env := apiServer.Get(t)
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	prov, err := gce.New(ctx, gce.Options{
		Project: gcetest.DefaultProject, Zone: defaultZone, Endpoint: fake.URL, HTTPClient: fake.HTTPClient(),
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{
			NamespacePrefix: "gce-",
			Workers:         2,
			Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderGCE: prov},
			Registry:        provider.Registry{gce.Registration()},
		}),
		fake: fake, gce: prov, target: proxytest.StartHTTPTarget(t).URL,
	}
}

// newCollector returns an orphan collector of the harness's gce provider
// with cfg's settings, its Proxy cache synced; the cache stops with the
// test.
func (h *harness) newCollector(t *testing.T, cfg gc.Config) *gc.Collector {
	t.Helper()
	return h.NewCollector(cfg, crawlv1alpha1.ProviderGCE, h.gce)
}

// startVMProxy runs a real forward proxy at ip (a loopback address the fake
// hands out as a VM's natIP) and returns its port.
func startVMProxy(t *testing.T, ip string) int32 {
	t.Helper()
	srv, err := forwardproxy.New(forwardproxy.Config{AllowCIDRs: []netip.Prefix{proxytest.Loopback}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("proxy Serve: %v", err)
		}
	})
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func gceProxy(name string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider:  crawlv1alpha1.ProviderGCE,
			GCE:       &crawlv1alpha1.GCEProvider{Port: port, NetworkTags: []string{"proxy"}},
			CloudInit: &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\npackages: [squid]\n")},
		},
	}
}

func TestControllerCreatesVMThatBecomesReady(t *testing.T) {
	t.Parallel()
	const ip = "127.0.0.21"
	fake := gcetest.New(t, gcetest.WithAddress(func(_, _, _ string) string { return ip }))
	h := startController(t, fake)
	port := startVMProxy(t, ip)
	spec := gceProxy("p1", port)
	spec.Spec.GCE.Spot = true
	created := h.Create(spec)

	p := h.WaitProvisioned("p1")
	name := provider.InstanceName(created.UID)
	// status.providerID may carry the provider's name in front of the ID.
	if want := gcetest.DefaultProject + "/" + defaultZone + "/" + name; !strings.HasSuffix(p.Status.ProviderID, want) {
		t.Errorf("providerID %q, want the instance ID %q", p.Status.ProviderID, want)
	}
	if p.Status.IP != ip || p.Status.Port != port {
		t.Errorf("status address %s:%d, want %s:%d", p.Status.IP, p.Status.Port, ip, port)
	}
	h.ProbeReady("p1", h.target)

	vm, ok := fake.Instance(gcetest.DefaultProject, defaultZone, name)
	if !ok {
		t.Fatal("no VM in the fake")
	}
	if vm.Labels["crawl-proxyfleet-io_proxy-uid"] != string(created.UID) || vm.Labels["crawl-proxyfleet-io_proxy-namespace"] != h.NS {
		t.Errorf("labels %v", vm.Labels)
	}
	// No spec.auth: the VM's metadata carries the generated credentials,
	// for its cloud-init to require (docs/gce.md).
	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(context.Background(), proxyaccess.GeneratedCredentialsSecret(created), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the generated credentials Secret: %v", err)
	}
	metadata := map[string]string{}
	for _, item := range vm.Metadata.Items {
		metadata[item.Key] = *item.Value
	}
	if metadata[gce.MetadataAuthUsername] != string(secret.Data["username"]) || metadata[gce.MetadataAuthPassword] != string(secret.Data["password"]) {
		t.Errorf("the VM's metadata does not carry the generated credentials of Secret %s", secret.Name)
	}
	if vm.Scheduling == nil || vm.Scheduling.ProvisioningModel != "SPOT" {
		t.Errorf("scheduling %+v, want a Spot VM", vm.Scheduling)
	}
	if n := fake.Calls(gcetest.MethodInsert); n != 1 {
		t.Errorf("%d inserts, want 1", n)
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "Proxy and VM gone", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(context.Background(), "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(fake.Instances()) == 0, fmt.Sprintf("get: %v, %d VMs", err, len(fake.Instances()))
	})
}

func TestControllerReplacesVMOnSpecChange(t *testing.T) {
	t.Parallel()
	const ip = "127.0.0.22"
	fake := gcetest.New(t, gcetest.WithAddress(func(_, _, _ string) string { return ip }), gcetest.WithSteps(2))
	h := startController(t, fake)
	port := startVMProxy(t, ip)
	created := h.Create(gceProxy("p1", port))
	h.WaitProvisioned("p1")
	h.ProbeReady("p1", h.target)
	name := provider.InstanceName(created.UID)

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.GCE.MachineType = "e2-medium" })
	h.Eventually(30*time.Second, "replacement VM running", func() (bool, string) {
		p := h.Get("p1")
		vm, ok := fake.Instance(gcetest.DefaultProject, defaultZone, name)
		if !ok {
			return false, "no VM"
		}
		return strings.HasSuffix(vm.MachineType, "/e2-medium") &&
				meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("VM %s %s, conditions %+v", vm.MachineType, vm.Status, p.Status.Conditions)
	})
	h.ProbeReady("p1", h.target)
	if n := len(fake.Instances()); n != 1 {
		t.Errorf("%d VMs after the replace, want exactly 1", n)
	}
	if ins, del := fake.Calls(gcetest.MethodInsert), fake.Calls(gcetest.MethodDelete); ins != 2 || del != 1 {
		t.Errorf("%d inserts and %d deletes, want 2 and 1", ins, del)
	}
}

func TestControllerQuotaExceededThenRecovers(t *testing.T) {
	t.Parallel()
	const ip = "127.0.0.23"
	fake := gcetest.New(t, gcetest.WithAddress(func(_, _, _ string) string { return ip }))
	fake.FailEvery(gcetest.MethodInsert, gcetest.QuotaExceeded())
	h := startController(t, fake)
	port := startVMProxy(t, ip)
	h.Create(gceProxy("p1", port))

	h.Eventually(30*time.Second, "QuotaExceeded", func() (bool, string) {
		p := h.Get("p1")
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonQuotaExceeded &&
			strings.Contains(c.Message, "Quota 'CPUS' exceeded"), fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	if p := h.Get("p1"); p.Status.Phase != crawlv1alpha1.PhaseProvisioning {
		t.Errorf("phase %q while out of quota, want Provisioning", p.Status.Phase)
	}
	// The controller retries on its fixed schedule, not in a tight loop.
	h.Eventually(10*time.Second, "a quota retry", func() (bool, string) {
		n := fake.Calls(gcetest.MethodInsert)
		return n >= 2, fmt.Sprintf("%d inserts", n)
	})

	fake.StopFailing(gcetest.MethodInsert)
	h.WaitProvisioned("p1")
	h.ProbeReady("p1", h.target)
	if n := len(fake.Instances()); n != 1 {
		t.Errorf("%d VMs, want 1", n)
	}
}

// TestGCCollectsOrphanedVM: VMs with the operator's labels whose Proxy is
// gone are deleted by pkg/gc through the gce provider; the VM of a live
// Proxy and a VM that is not the operator's are left alone.
func TestGCCollectsOrphanedVM(t *testing.T) {
	t.Parallel()
	const ip = "127.0.0.24"
	fake := gcetest.New(t, gcetest.WithAddress(func(_, _, _ string) string { return ip }), gcetest.WithZones(gcetest.DefaultProject, defaultZone, "test-zone-b"))
	h := startController(t, fake)
	port := startVMProxy(t, ip)
	live := h.Create(gceProxy("live", port))
	h.WaitProvisioned("live")
	h.ProbeReady("live", h.target)
	ctx := context.Background()

	// An orphan left by a crash between Create and the status write of a
	// Proxy deleted meanwhile: exact tags in metadata.
	// (Its credentials Secret outlives it, as a user's may.)
	if _, err := h.Kube.CoreV1().Secrets(h.NS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gone-credentials", Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		StringData: map[string]string{"username": "crawler", "password": "gone-password"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: "gone", UID: uuid.NewUUID()},
		Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderGCE, Auth: &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "gone-credentials"}}}}
	orphan, err := h.gce.Create(ctx, provider.CreateRequest{Name: provider.InstanceName(gone.UID), Proxy: gone, Tags: provider.Tags(gone)})
	if err != nil {
		t.Fatal(err)
	}
	// An orphan in another zone with labels only (made by an older version,
	// or by hand): its dotted Proxy name comes back from the label mapping.
	labelledUID := uuid.NewUUID()
	fake.Put(gcetest.DefaultProject, "test-zone-b", labelledVM(provider.InstanceName(labelledUID), map[string]string{
		"crawl-proxyfleet-io_managed-by":      crawlv1alpha1.ManagedByValue,
		"crawl-proxyfleet-io_proxy-uid":       string(labelledUID),
		"crawl-proxyfleet-io_proxy-namespace": h.NS,
		"crawl-proxyfleet-io_proxy-name":      "gone_too",
	}))
	// Not the operator's.
	fake.Put(gcetest.DefaultProject, defaultZone, labelledVM("someone-elses", map[string]string{"team": "search"}))

	collector := h.newCollector(t, gc.Config{Interval: time.Minute})
	deleted, err := collector.CollectOnce(ctx)
	if err != nil || deleted != 2 {
		t.Fatalf("CollectOnce = %d, %v; want 2 orphans deleted", deleted, err)
	}
	h.Eventually(10*time.Second, "orphans gone", func() (bool, string) {
		var names []string
		for _, vm := range fake.Instances() {
			// Get moves a deleted VM on to its end.
			_, _ = h.gce.Get(ctx, gcetest.DefaultProject+"/"+lastSegment(vm.Zone)+"/"+vm.Name)
			names = append(names, vm.Name)
		}
		_, orphanLeft := fake.Instance(gcetest.DefaultProject, defaultZone, provider.InstanceName(gone.UID))
		_, labelledLeft := fake.Instance(gcetest.DefaultProject, "test-zone-b", provider.InstanceName(labelledUID))
		return !orphanLeft && !labelledLeft, fmt.Sprintf("VMs %v", names)
	})
	if _, ok := fake.Instance(gcetest.DefaultProject, defaultZone, provider.InstanceName(live.UID)); !ok {
		t.Error("the live Proxy's VM was collected")
	}
	if _, ok := fake.Instance(gcetest.DefaultProject, defaultZone, "someone-elses"); !ok {
		t.Error("a VM that is not the operator's was collected")
	}
	if p := h.Get("live"); p.Status.Phase != crawlv1alpha1.PhaseReady {
		t.Errorf("the live Proxy is %s after GC", p.Status.Phase)
	}
	if _, err := h.gce.Get(ctx, orphan.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of the collected orphan: %v", err)
	}
	if deleted, err := collector.CollectOnce(ctx); err != nil || deleted != 0 {
		t.Errorf("a second round = %d, %v; want nothing to do", deleted, err)
	}
}

// labelledVM is a running VM as someone else might have made it: labels, no
// operator metadata.
func labelledVM(name string, labels map[string]string) *compute.Instance {
	return &compute.Instance{
		Name:              name,
		MachineType:       "e2-micro",
		Labels:            labels,
		NetworkInterfaces: []*compute.NetworkInterface{{Network: "global/networks/default", AccessConfigs: []*compute.AccessConfig{{Type: "ONE_TO_ONE_NAT", NatIP: "127.0.0.99"}}}},
	}
}

func lastSegment(u string) string { return u[strings.LastIndex(u, "/")+1:] }
