package poolintegration_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/azuretest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestAzurePoolScalesAndRotates: a pool of azure members, the operator
// binary driving the Azure SDK against azuretest over TLS (its Resource
// Manager, authority and certificate in the environment, a service
// principal's Secret), where every VM boots a real forward proxy on its
// public (loopback) IP with the port and credentials of its custom data,
// so a member is Ready only if the operator's probe goes through the proxy
// its own create configured. The pool scales up, rotates onto another
// size within its surge and unavailability bounds, scales down, and is
// deleted, leaving no VM, NIC or public IP.
func TestAzurePoolScalesAndRotates(t *testing.T) {
	t.Parallel()
	fake := azuretest.New(t, azuretest.WithSteps(1), azuretest.WithGetLag(1),
		azuretest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir(), env: fake.Env(t)}
	pt.ns = operatortest.NewNamespace(t, kube)
	sp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "azure-sp"}, StringData: map[string]string{
		"tenantID": azuretest.TenantID, "clientID": azuretest.ClientID, "clientSecret": azuretest.ClientSecret}}
	if _, err := kube.CoreV1().Secrets(pt.ns).Create(t.Context(), sp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pt.flags = []string{"--providers=azure", "--azure-subscription-id=" + azuretest.SubscriptionID, "--azure-resource-group=" + azuretest.ResourceGroup,
		"--azure-location=westeurope", "--azure-subnet-id=" + azuretest.SubnetID, "--azure-cluster-id=pools", "--azure-credentials-secret=" + pt.ns + "/azure-sp"}
	pt.start()

	const vmSmall, vmLarge = "Standard_B1s", "Standard_B1ms"
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("vms", 2, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.Provider = crawlv1alpha1.ProviderAzure
		p.Spec.Template.Spec.Azure = &crawlv1alpha1.AzureProvider{VMSizes: []string{vmSmall}}
	}))
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members", func(ctx context.Context) error { return pt.vmsSettled(ctx, fake, 2, vmSmall) })

	pt.updatePool("vms", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](3) })
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.vmsSettled(ctx, fake, 3, vmSmall) })

	s := pt.sample("vms")
	pt.updatePool("vms", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.Azure.VMSizes = []string{vmLarge} })
	eventually.Check(t, 3*time.Minute, interval, "3 Ready members on "+vmLarge, func(ctx context.Context) error {
		return pt.vmsSettled(ctx, fake, 3, vmLarge)
	})
	s.finish()
	t.Logf("%d samples during the rotation: min Ready %d, max members %d", s.samples, s.minReady, s.maxMembers)
	if s.minReady < 2 || s.maxMembers > 4 || s.samples < 10 {
		t.Errorf("rotation: min Ready %d (maxUnavailable 1 allows 2), max members %d (maxSurge 1 allows 4), %d samples", s.minReady, s.maxMembers, s.samples)
	}

	pt.updatePool("vms", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](1) })
	eventually.Check(t, 2*time.Minute, interval, "1 Ready member", func(ctx context.Context) error { return pt.vmsSettled(ctx, fake, 1, vmLarge) })

	if err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Delete(t.Context(), "vms", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "members, VMs, NICs and public IPs gone", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "vms")
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("%d members left (%v)", len(ms), err)
		}
		if left := fake.Resources(); len(left) > 0 {
			return fmt.Errorf("resources left: %v", left)
		}
		return nil
	})
}

// vmsSettled: the pool settled with replicas members, and the VMs are
// exactly the members' (one each, of size, the one the status names):
// nothing leaked, nothing doubled.
func (pt *poolTest) vmsSettled(ctx context.Context, fake *azuretest.Fake, replicas int, size string) error {
	if err := pt.settled(ctx, "vms", replicas); err != nil {
		return err
	}
	ms, err := pt.members(ctx, "vms")
	if err != nil {
		return err
	}
	up := fake.VMs()
	if len(up) != len(ms) {
		return fmt.Errorf("%d VMs up for %d members: %v", len(up), len(ms), up)
	}
	for _, m := range ms {
		i := slices.IndexFunc(up, func(vm azuretest.VM) bool {
			return vm.Tags["pxo-proxy-uid"] == string(m.UID) && m.Status.ProviderID == "azure://"+vm.Name
		})
		if i < 0 || up[i].Size != size {
			return fmt.Errorf("member %s (%s): no %s VM up for it in %v", m.Name, m.Status.ProviderID, size, up)
		}
	}
	return nil
}
