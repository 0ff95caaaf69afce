package crawlpolicy

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

type statsStore struct{ stats []store.RuleStats }

func (s statsStore) CrawlPolicyStats(store.ObjectName) []store.RuleStats { return s.stats }

// TestStatusWriter: the counts reach status, summed, once; an unchanged
// status is not written again.
func TestStatusWriter(t *testing.T) {
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "polite", Generation: 2}}
	client := fake.NewSimpleClientset(p)
	factory := crawlinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Crawl().V1alpha1().CrawlPolicies()
	if err := informer.Informer().GetIndexer().Add(p); err != nil {
		t.Fatal(err)
	}
	stats := statsStore{stats: []store.RuleStats{{Host: "shop.example", InUse: 2, Waited: 5, Refused: 1}, {Host: "*", InUse: 1, Waited: 0, Refused: 3}}}
	w := NewStatusWriter(client, informer.Lister(), stats, 0)
	w.writeAll(context.Background())
	got, err := client.CrawlV1alpha1().CrawlPolicies("crawl").Get(context.Background(), "polite", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := crawlv1alpha1.CrawlPolicyStatus{ObservedGeneration: 2, RuleCount: 2, InUse: 3, Waited: 5, Refused: 4, Rules: []crawlv1alpha1.DomainRuleStatus{
		{Host: "shop.example", InUse: 2, Waited: 5, Refused: 1}, {Host: "*", InUse: 1, Refused: 3}}}
	if diff := cmp.Diff(want, got.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	// The lister now holds the written status: nothing more to write.
	if err := informer.Informer().GetIndexer().Update(got); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	w.writeAll(context.Background())
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d API calls for an unchanged status, want none", n)
	}
}
