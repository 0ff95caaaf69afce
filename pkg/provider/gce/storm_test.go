package gce_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
)

const uidLabel = "crawl-proxyfleet-io_proxy-uid"

// TestFaultStormLeaksAndDuplicatesNothing: a fleet of gce Proxies is
// created, edited and deleted while Compute Engine rate-limits, fails and
// loses the answers of calls that took effect, with the orphan collector
// running as on the leader. One Proxy also has a second VM in another zone,
// as a crash between an insert and its status write followed by a zone
// edit leaves behind. Once the faults stop the fleet converges: every Proxy
// provisioned on exactly one VM, its own, from its current spec; no VM of
// a deleted Proxy left; and from then on no sample shows a second VM of a
// Proxy. Deleting the rest leaves nothing.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	const (
		n  = 20
		ip = "127.0.0.26"
	)
	fake := gcetest.New(t, gcetest.WithAddress(func(_, _, _ string) string { return ip }), gcetest.WithSteps(2))
	h := startController(t, fake)
	port := startVMProxy(t, ip)
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	fake.SetRandomFaults(0.2, 20261205)
	fake.LoseNextAnswers(gcetest.MethodInsert, 3)

	uids := map[string]string{}
	for i := range n {
		p := h.Create(gceProxy(fmt.Sprintf("s%02d", i), port))
		uids[p.Name] = string(p.UID)
	}
	// s19's VM of an earlier spec, in the other zone, that its status
	// never named.
	fake.Put(gcetest.DefaultProject, "test-zone-b", &compute.Instance{
		Name: provider.InstanceName(h.Get("s19").UID), MachineType: "e2-micro",
		Labels: map[string]string{uidLabel: uids["s19"], "crawl-proxyfleet-io_managed-by": "proxy-operator",
			"crawl-proxyfleet-io_proxy-namespace": h.NS, "crawl-proxyfleet-io_proxy-name": "s19"},
	})
	time.Sleep(2 * time.Second)
	edited, deleted := []string{"s00", "s01", "s02", "s03"}, []string{"s04", "s05", "s06", "s07"}
	for _, name := range edited {
		h.Update(name, func(p *crawlv1alpha1.Proxy) { p.Spec.GCE.MachineType = "e2-medium" })
	}
	for _, name := range deleted {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	fake.SetRandomFaults(0, 0)
	t.Logf("storm over: %d inserts, %d gets, %d deletes", fake.Calls(gcetest.MethodInsert),
		fake.Calls(gcetest.MethodGet), fake.Calls(gcetest.MethodDelete))

	h.Eventually(2*time.Minute, "the fleet converged", func() (bool, string) {
		live := liveByUID(fake)
		for name, uid := range uids {
			p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
			if slices.Contains(deleted, name) {
				if !apierrors.IsNotFound(err) || len(live[uid]) != 0 {
					return false, fmt.Sprintf("deleted %s: %v, live VMs %v", name, err, vmNames(live[uid]))
				}
				continue
			}
			if err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) ||
				len(live[uid]) != 1 || !matchesStatus(p, live[uid][0]) {
				return false, fmt.Sprintf("%s: providerID %q, conditions %+v, live VMs %v", name, p.Status.ProviderID, p.Status.Conditions, vmNames(live[uid]))
			}
		}
		return true, ""
	})

	// Converged: from now on every sample, one every quarter second over
	// five seconds (ten collector rounds), holds one VM per Proxy.
	samples := time.NewTicker(250 * time.Millisecond)
	defer samples.Stop()
	for i := range 20 {
		live := liveByUID(fake)
		for name, uid := range uids {
			if len(live[uid]) > 1 {
				t.Fatalf("sample %d after convergence: %s has VMs %v", i, name, vmNames(live[uid]))
			}
		}
		<-samples.C
	}

	for name := range uids {
		_ = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{})
	}
	h.Eventually(time.Minute, "nothing left", func() (bool, string) {
		var left []string
		for _, vm := range fake.Instances() {
			// A Get moves a deleted VM on to its end.
			_, _ = h.gce.Get(h.Ctx, gcetest.DefaultProject+"/"+lastSegment(vm.Zone)+"/"+vm.Name)
			if vm.Status != "STOPPING" {
				left = append(left, lastSegment(vm.Zone)+"/"+vm.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("VMs %v", left)
	})
}

// liveByUID are the fake's VMs that are not being deleted, by the Proxy UID
// they carry.
func liveByUID(fake *gcetest.Server) map[string][]*compute.Instance {
	out := map[string][]*compute.Instance{}
	for _, vm := range fake.Instances() {
		if vm.Status == "STOPPING" {
			continue // on its way out: the controller has let go of it
		}
		out[vm.Labels[uidLabel]] = append(out[vm.Labels[uidLabel]], vm)
	}
	return out
}

func vmNames(vms []*compute.Instance) []string {
	var out []string
	for _, vm := range vms {
		out = append(out, lastSegment(vm.Zone)+"/"+vm.Name+" "+vm.Status)
	}
	return out
}

// matchesStatus: the Proxy's status names vm, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, vm *compute.Instance) bool {
	if !strings.HasSuffix(p.Status.ProviderID, "/"+lastSegment(vm.Zone)+"/"+vm.Name) || vm.Metadata == nil {
		return false
	}
	for _, item := range vm.Metadata.Items {
		if item.Key == gce.MetadataSpecHash {
			return item.Value != nil && *item.Value == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
		}
	}
	return false
}
