package digitalocean_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/cloudstorm"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
)

// TestFaultStormLeaksAndDuplicatesNothing: a fleet of digitalocean
// Proxies is created, edited and deleted while the API rate-limits, fails,
// runs out of capacity, loses the answers of creates and deletes it
// carried out and lists new droplets by tag late, with the orphan
// collector running as on the leader. Once the faults stop the fleet
// converges: every Proxy on exactly one live droplet, its own, from its
// current spec; no droplet of a deleted Proxy left; and no Proxy that was
// never edited ever had a second droplet created (a create's key is a tag,
// and a create whose answer was lost waits for its droplet to be listed,
// then adopts it). Deleting the rest leaves nothing. The storm and its
// checks are cloudstorm.Run's.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	const n = 20
	h := startController(t, dotest.WithSteps(2), dotest.WithListLag(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261205)
	h.fake.LoseNextAnswers(dotest.CreateDroplet, 3)
	h.fake.LoseNextAnswers(dotest.DeleteDroplet, 2)

	calls := h.fake.Calls
	res := cloudstorm.Run(h.Harness, n, cloudstorm.Cloud[dotest.Droplet]{
		Noun:  "droplet",
		Proxy: func(name string) *crawlv1alpha1.Proxy { return h.dropletProxy(name, 3128) },
		Edit:  func(p *crawlv1alpha1.Proxy) { p.Spec.DigitalOcean.Sizes = []string{"s-1vcpu-1gb"} },

		Creates:   func() int { return calls(dotest.CreateDroplet) },
		Mutations: func() int { return calls(dotest.CreateDroplet) + calls(dotest.DeleteDroplet) },
		Calls: func() int {
			return calls(dotest.CreateDroplet) + calls(dotest.DeleteDroplet) + calls(dotest.GetDroplet) + calls(dotest.ListDroplets)
		},
		MinCalls:   300,
		StopFaults: func() { h.fake.SetRandomFaults(0, 0) },
		Summary: func() string {
			return fmt.Sprintf("%d creates, %d gets, %d lists, %d deletes", calls(dotest.CreateDroplet),
				calls(dotest.GetDroplet), calls(dotest.ListDroplets), calls(dotest.DeleteDroplet))
		},

		Live:    h.fake.Droplets,
		Created: h.fake.Created,
		UID:     proxyUID,
		Matches: matchesStatus,
	})
	t.Logf("converged: %d droplets created for %d Proxies, 0 leaked, %d duplicates", res.Created, n, res.Duplicates)
}

// proxyUID is the Proxy UID a droplet's tags name.
func proxyUID(d dotest.Droplet) string {
	for _, tag := range d.Tags {
		if uid, ok := strings.CutPrefix(tag, "pxo:proxy-uid:"); ok {
			return uid
		}
	}
	return ""
}

// matchesStatus: the Proxy's status names d, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, d dotest.Droplet) bool {
	return strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", d.ID)) &&
		d.HasTag("pxo:spec-hash:"+p.Annotations[crawlv1alpha1.SpecHashAnnotation])
}
