package crawlpolicy

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

type blocksStore struct {
	statsStore
	blocks []store.SiteBlock
}

func (s *blocksStore) SiteBlocks() ([]store.SiteBlock, error) { return s.blocks, nil }

// A block is announced once on the policy that governs the site, again
// only after it ended and came back; a site no policy governs, and one of
// a policy that is gone, are not.
func TestSiteBanEventsOncePerBlock(t *testing.T) {
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "polite", UID: "polite-uid"}}
	client := fake.NewSimpleClientset(p)
	informer := crawlinformers.NewSharedInformerFactory(client, 0).Crawl().V1alpha1().CrawlPolicies()
	if err := informer.Informer().GetIndexer().Add(p); err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 12, 7, 12, 10, 0, 0, time.UTC)
	hostile := store.SiteBlock{Namespace: "crawl", Site: "hostile.example", Domain: "www.hostile.example", Tier: -1, Proxies: 5,
		Window: 10 * time.Minute, Until: until, Policy: "polite"}
	ungoverned := store.SiteBlock{Namespace: "crawl", Site: "other.example", Domain: "other.example", Tier: -1, Proxies: 5, Window: 10 * time.Minute, Until: until}
	gone := store.SiteBlock{Namespace: "crawl", Site: "x.example", Domain: "x.example", Tier: -1, Proxies: 5, Window: 10 * time.Minute, Until: until, Policy: "deleted"}
	st := &blocksStore{}
	rec := record.NewFakeRecorder(10)
	w := NewStatusWriter(client, informer.Lister(), st, 0).WithSiteBanEvents(st, rec)
	var got []string
	for _, blocks := range [][]store.SiteBlock{{hostile, ungoverned, gone}, {hostile}, {}, {hostile}} {
		st.blocks = blocks
		w.announceSiteBans(context.Background())
	drain:
		for {
			select {
			case e := <-rec.Events:
				got = append(got, e)
			default:
				break drain
			}
		}
	}
	event := "Warning SiteBanning hostile.example (latest ban for www.hostile.example) banned 5 distinct proxies within 10m0s: " +
		"no lease for it until 2026-12-07T12:10:00Z (429 SiteBanning, gateway site_banning)"
	if diff := cmp.Diff([]string{event, event}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
