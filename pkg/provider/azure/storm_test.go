package azure_test

import (
	"fmt"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/azuretest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/cloudstorm"
)

// TestFaultStormLeaksAndDuplicatesNothing: a fleet of azure Proxies is
// created, edited and deleted while Resource Manager rate-limits, fails,
// runs out of capacity, loses the answers of PUTs, DELETEs and polls it
// carried out and shows new VMs late, with the orphan collector running as
// on the leader. Once the faults stop the fleet converges: every Proxy on
// exactly one live VM, its own, from its current spec; no VM of a deleted
// Proxy left; no Proxy that was never edited ever had a second VM created
// (a create's resources are named after its key). Deleting the rest leaves
// nothing, NICs, public IPs and security groups included. The storm and
// its checks are cloudstorm.Run's.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	const n = 20
	h := startController(t, azuretest.WithSteps(2), azuretest.WithGetLag(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261205)
	h.fake.LoseNextAnswers(azuretest.PutVM, 3)
	h.fake.LoseNextAnswers(azuretest.DeleteVM, 2)
	h.fake.LoseNextAnswers(azuretest.GetOperation, 2)

	calls := h.fake.Calls
	all := func() int {
		sum := 0
		for _, op := range []azuretest.Op{azuretest.PutVM, azuretest.GetVM, azuretest.ListVMs, azuretest.DeleteVM, azuretest.PutNIC, azuretest.GetNIC,
			azuretest.DeleteNIC, azuretest.PutIP, azuretest.GetIP, azuretest.ListIPs, azuretest.DeleteIP, azuretest.PutNSG, azuretest.GetOperation} {
			sum += calls(op)
		}
		return sum
	}
	res := cloudstorm.Run(h.Harness, n, cloudstorm.Cloud[azuretest.VM]{
		Noun: "VM",
		Proxy: func(name string) *crawlv1alpha1.Proxy {
			p := h.vmProxy(name, 3128)
			p.Spec.Azure.AllowFrom = []crawlv1alpha1.CIDR{"203.0.113.0/24"}
			return p
		},
		Edit: func(p *crawlv1alpha1.Proxy) { p.Spec.Azure.VMSizes = []string{"Standard_B1ms"} },

		Creates: func() int { return calls(azuretest.PutVM) },
		// A create or delete here is three resources' PUTs or DELETEs,
		// each meeting the storm.
		Mutations: func() int {
			return calls(azuretest.PutVM) + calls(azuretest.DeleteVM) + calls(azuretest.PutNIC) + calls(azuretest.DeleteNIC) +
				calls(azuretest.PutIP) + calls(azuretest.DeleteIP)
		},
		Calls:      all,
		MinCalls:   300,
		StopFaults: func() { h.fake.SetRandomFaults(0, 0) },
		Summary: func() string {
			return fmt.Sprintf("%d VM PUTs, %d VM GETs, %d polls, %d VM DELETEs, %d calls in all", calls(azuretest.PutVM),
				calls(azuretest.GetVM), calls(azuretest.GetOperation), calls(azuretest.DeleteVM), all())
		},

		Live:    h.fake.VMs,
		Created: h.fake.Created,
		UID:     func(vm azuretest.VM) string { return vm.Tags["pxo-proxy-uid"] },
		Matches: func(p *crawlv1alpha1.Proxy, vm azuretest.VM) bool {
			return p.Status.ProviderID == "azure://"+vm.Name && vm.Tags["pxo-spec-hash"] == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
		},
	})
	h.Eventually(30*time.Second, "no NIC, public IP or security group left", func() (bool, string) {
		left := h.fake.Resources()
		return len(left) == 0, fmt.Sprintf("left %v", left)
	})
	t.Logf("converged: %d VMs created for %d Proxies, 0 leaked, %d duplicates", res.Created, n, res.Duplicates)
}
