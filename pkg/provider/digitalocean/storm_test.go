package digitalocean_test

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
// then adopts it). Deleting the rest leaves nothing.
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	const n = 20
	h := startController(t, dotest.WithSteps(2), dotest.WithListLag(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261205)
	h.fake.LoseNextAnswers(dotest.CreateDroplet, 3)
	h.fake.LoseNextAnswers(dotest.DeleteDroplet, 2)

	uids := map[string]string{}
	for i := range n {
		p := h.Create(h.dropletProxy(fmt.Sprintf("s%02d", i), 3128))
		uids[p.Name] = string(p.UID)
	}
	h.Eventually(time.Minute, "creates under way", func() (bool, string) {
		return h.fake.Calls(dotest.CreateDroplet) >= n, fmt.Sprintf("%d creates", h.fake.Calls(dotest.CreateDroplet))
	})
	edited, deleted := []string{"s00", "s01", "s02", "s03"}, []string{"s04", "s05", "s06", "s07"}
	for _, name := range edited {
		h.Update(name, func(p *crawlv1alpha1.Proxy) { p.Spec.DigitalOcean.Sizes = []string{"s-1vcpu-1gb"} })
	}
	for _, name := range deleted {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The storm goes on until the edits and deletes have met it too, and
	// for at least 300 calls in all.
	before := h.fake.Calls(dotest.CreateDroplet) + h.fake.Calls(dotest.DeleteDroplet)
	h.Eventually(time.Minute, "edits and deletes under way", func() (bool, string) {
		now := h.fake.Calls(dotest.CreateDroplet) + h.fake.Calls(dotest.DeleteDroplet)
		all := now + h.fake.Calls(dotest.GetDroplet) + h.fake.Calls(dotest.ListDroplets)
		return now >= before+len(edited)+len(deleted) && all >= 300, fmt.Sprintf("%d creates and deletes since the edits, %d calls", now-before, all)
	})
	h.fake.SetRandomFaults(0, 0)
	t.Logf("storm over: %d creates, %d gets, %d lists, %d deletes", h.fake.Calls(dotest.CreateDroplet),
		h.fake.Calls(dotest.GetDroplet), h.fake.Calls(dotest.ListDroplets), h.fake.Calls(dotest.DeleteDroplet))

	h.Eventually(2*time.Minute, "the fleet converged", func() (bool, string) {
		live := liveByUID(h.fake)
		for name, uid := range uids {
			p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
			if slices.Contains(deleted, name) {
				if !apierrors.IsNotFound(err) || len(live[uid]) != 0 {
					return false, fmt.Sprintf("deleted %s: %v, live droplets %v", name, err, live[uid])
				}
				continue
			}
			if err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) ||
				len(live[uid]) != 1 || !matchesStatus(p, live[uid][0]) {
				return false, fmt.Sprintf("%s: providerID %q, conditions %+v, live droplets %v", name, p.Status.ProviderID, p.Status.Conditions, live[uid])
			}
		}
		return true, ""
	})

	// Converged: from now on every sample, one every quarter second over
	// five seconds (ten collector rounds), holds one droplet per Proxy.
	samples := time.NewTicker(250 * time.Millisecond)
	defer samples.Stop()
	for i := range 20 {
		for name, uid := range uids {
			if live := liveByUID(h.fake)[uid]; len(live) > 1 {
				t.Fatalf("sample %d after convergence: %s has %d live droplets: %v", i, name, len(live), live)
			}
		}
		<-samples.C
	}

	created := map[string]int{}
	for _, d := range h.fake.Created() {
		created[proxyUID(d)]++
	}
	duplicates := 0
	for name, uid := range uids {
		switch {
		case slices.Contains(deleted, name) && created[uid] > 1:
			t.Errorf("%s was deleted and had %d droplets created, want at most 1", name, created[uid])
			duplicates++
		case !slices.Contains(edited, name) && !slices.Contains(deleted, name) && created[uid] != 1:
			t.Errorf("%s was never edited and had %d droplets created, want 1", name, created[uid])
			duplicates++
		}
	}

	for name := range uids {
		_ = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{})
	}
	h.Eventually(time.Minute, "nothing left", func() (bool, string) {
		left := h.fake.Droplets()
		return len(left) == 0, fmt.Sprintf("droplets %v", left)
	})
	t.Logf("converged: %d droplets created for %d Proxies, 0 leaked, %d duplicates", len(h.fake.Created()), n, duplicates)
}

// liveByUID are the fake's droplets, by their Proxy UID.
func liveByUID(fake *dotest.Fake) map[string][]dotest.Droplet {
	out := map[string][]dotest.Droplet{}
	for _, d := range fake.Droplets() {
		out[proxyUID(d)] = append(out[proxyUID(d)], d)
	}
	return out
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
