package hetzner_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/cloudstorm"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// TestFaultStormLeaksAndDuplicatesNothing: a fleet of hetzner Proxies is
// created, edited and deleted while the API rate-limits, fails, runs out
// of capacity, loses the answers of creates and deletes it carried out and
// lists new servers late, with the orphan collector running as on the
// leader. Once the faults stop the fleet converges: every Proxy on exactly
// one live server, its own, from its current spec; no server of a deleted
// Proxy left; and no Proxy that was never edited ever had a second server
// created (a create's name is its idempotency key, so a retried create
// adopts). Deleting the rest leaves nothing. The storm and its checks are
// cloudstorm.Run's.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	const n = 20
	h := startController(t, hcloudtest.WithSteps(2), hcloudtest.WithListLag(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261205)
	h.fake.LoseNextAnswers(hcloudtest.CreateServer, 3)
	h.fake.LoseNextAnswers(hcloudtest.DeleteServer, 2)

	calls := h.fake.Calls
	res := cloudstorm.Run(h.Harness, n, cloudstorm.Cloud[hcloudtest.Server]{
		Noun:  "server",
		Proxy: func(name string) *crawlv1alpha1.Proxy { return h.hetznerProxy(name, 3128) },
		Edit:  func(p *crawlv1alpha1.Proxy) { p.Spec.Hetzner.ServerTypes = []string{"cpx11"} },

		Creates:   func() int { return calls(hcloudtest.CreateServer) },
		Mutations: func() int { return calls(hcloudtest.CreateServer) + calls(hcloudtest.DeleteServer) },
		Calls: func() int {
			return calls(hcloudtest.CreateServer) + calls(hcloudtest.DeleteServer) + calls(hcloudtest.GetServer) + calls(hcloudtest.ListServers)
		},
		MinCalls:   300,
		StopFaults: func() { h.fake.SetRandomFaults(0, 0) },
		Summary: func() string {
			return fmt.Sprintf("%d creates, %d gets, %d lists, %d deletes", calls(hcloudtest.CreateServer),
				calls(hcloudtest.GetServer), calls(hcloudtest.ListServers), calls(hcloudtest.DeleteServer))
		},

		Live:    liveServers(h.fake),
		Created: h.fake.Created,
		UID:     func(s hcloudtest.Server) string { return s.Labels[crawlv1alpha1.TagProxyUID] },
		Matches: matchesStatus,
	})
	t.Logf("converged: %d servers created for %d Proxies, 0 leaked, %d duplicates", res.Created, n, res.Duplicates)
}

// liveServers lists the fake's servers not being deleted.
func liveServers(fake *hcloudtest.Fake) func() []hcloudtest.Server {
	return func() []hcloudtest.Server {
		return slices.DeleteFunc(fake.Servers(), func(s hcloudtest.Server) bool { return s.Status == "deleting" })
	}
}

// matchesStatus: the Proxy's status names s, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, s hcloudtest.Server) bool {
	return strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", s.ID)) &&
		s.Labels[cloudkit.LabelSpecHash] == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
}
