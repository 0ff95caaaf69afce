package hetzner_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
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
// adopts). Deleting the rest leaves nothing.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	const n = 20
	h := startController(t, hcloudtest.WithSteps(2), hcloudtest.WithListLag(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261205)
	h.fake.LoseNextAnswers(hcloudtest.CreateServer, 3)
	h.fake.LoseNextAnswers(hcloudtest.DeleteServer, 2)

	uids := map[string]string{}
	for i := range n {
		p := h.Create(h.hetznerProxy(fmt.Sprintf("s%02d", i), 3128))
		uids[p.Name] = string(p.UID)
	}
	h.Eventually(time.Minute, "creates under way", func() (bool, string) {
		return h.fake.Calls(hcloudtest.CreateServer) >= n, fmt.Sprintf("%d creates", h.fake.Calls(hcloudtest.CreateServer))
	})
	edited, deleted := []string{"s00", "s01", "s02", "s03"}, []string{"s04", "s05", "s06", "s07"}
	for _, name := range edited {
		h.Update(name, func(p *crawlv1alpha1.Proxy) { p.Spec.Hetzner.ServerTypes = []string{"cpx11"} })
	}
	for _, name := range deleted {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The storm goes on until the edits and deletes have met it too, and
	// for at least 300 calls in all.
	before := h.fake.Calls(hcloudtest.CreateServer) + h.fake.Calls(hcloudtest.DeleteServer)
	h.Eventually(time.Minute, "edits and deletes under way", func() (bool, string) {
		now := h.fake.Calls(hcloudtest.CreateServer) + h.fake.Calls(hcloudtest.DeleteServer)
		all := now + h.fake.Calls(hcloudtest.GetServer) + h.fake.Calls(hcloudtest.ListServers)
		return now >= before+len(edited)+len(deleted) && all >= 300, fmt.Sprintf("%d creates and deletes since the edits, %d calls", now-before, all)
	})
	h.fake.SetRandomFaults(0, 0)
	t.Logf("storm over: %d creates, %d gets, %d lists, %d deletes", h.fake.Calls(hcloudtest.CreateServer),
		h.fake.Calls(hcloudtest.GetServer), h.fake.Calls(hcloudtest.ListServers), h.fake.Calls(hcloudtest.DeleteServer))

	h.Eventually(2*time.Minute, "the fleet converged", func() (bool, string) {
		live := liveByUID(h.fake)
		for name, uid := range uids {
			p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
			if slices.Contains(deleted, name) {
				if !apierrors.IsNotFound(err) || len(live[uid]) != 0 {
					return false, fmt.Sprintf("deleted %s: %v, live servers %v", name, err, live[uid])
				}
				continue
			}
			if err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) ||
				len(live[uid]) != 1 || !matchesStatus(p, live[uid][0]) {
				return false, fmt.Sprintf("%s: providerID %q, conditions %+v, live servers %v", name, p.Status.ProviderID, p.Status.Conditions, live[uid])
			}
		}
		return true, ""
	})

	// Converged: from now on every sample, one every quarter second over
	// five seconds (ten collector rounds), holds one server per Proxy.
	samples := time.NewTicker(250 * time.Millisecond)
	defer samples.Stop()
	for i := range 20 {
		for name, uid := range uids {
			if live := liveByUID(h.fake)[uid]; len(live) > 1 {
				t.Fatalf("sample %d after convergence: %s has %d live servers: %v", i, name, len(live), live)
			}
		}
		<-samples.C
	}

	created := map[string]int{}
	for _, s := range h.fake.Created() {
		created[s.Labels[crawlv1alpha1.TagProxyUID]]++
	}
	duplicates := 0
	for name, uid := range uids {
		switch {
		case slices.Contains(deleted, name) && created[uid] > 1:
			t.Errorf("%s was deleted and had %d servers created, want at most 1", name, created[uid])
			duplicates++
		case !slices.Contains(edited, name) && !slices.Contains(deleted, name) && created[uid] != 1:
			t.Errorf("%s was never edited and had %d servers created, want 1", name, created[uid])
			duplicates++
		}
	}

	for name := range uids {
		_ = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{})
	}
	h.Eventually(time.Minute, "nothing left", func() (bool, string) {
		left := slices.DeleteFunc(h.fake.Servers(), func(s hcloudtest.Server) bool { return s.Status == "deleting" })
		return len(left) == 0, fmt.Sprintf("servers %v", left)
	})
	t.Logf("converged: %d servers created for %d Proxies, 0 leaked, %d duplicates", len(h.fake.Created()), n, duplicates)
}

// liveByUID are the fake's servers not being deleted, by their Proxy UID.
func liveByUID(fake *hcloudtest.Fake) map[string][]hcloudtest.Server {
	out := map[string][]hcloudtest.Server{}
	for _, s := range fake.Servers() {
		if s.Status != "deleting" {
			uid := s.Labels[crawlv1alpha1.TagProxyUID]
			out[uid] = append(out[uid], s)
		}
	}
	return out
}

// matchesStatus: the Proxy's status names s, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, s hcloudtest.Server) bool {
	return strings.HasSuffix(p.Status.ProviderID, fmt.Sprintf("://%d", s.ID)) &&
		s.Labels[cloudkit.LabelSpecHash] == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
}
