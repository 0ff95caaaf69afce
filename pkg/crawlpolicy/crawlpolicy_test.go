package crawlpolicy

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

func TestResolve(t *testing.T) {
	p := &crawlv1alpha1.CrawlPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "polite"},
		Spec: crawlv1alpha1.CrawlPolicySpec{
			Rules: []crawlv1alpha1.DomainRule{
				{Host: "shop.example", DomainLimits: crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To[int32](3)}},
				{Host: "*.news.example", DomainLimits: crawlv1alpha1.DomainLimits{MinInterval: &metav1.Duration{Duration: 200 * time.Millisecond},
					MinIntervalPerProxy: &metav1.Duration{Duration: 5 * time.Second}}},
			},
			Default: &crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To[int32](10)},
		},
	}
	want := lease.CrawlPolicy{
		Key: cache.NewObjectName("crawl", "polite"),
		Rules: map[string]lease.DomainLimits{
			"shop.example":   {MaxConcurrent: 3},
			"*.news.example": {MinInterval: 200 * time.Millisecond, MinIntervalPerProxy: 5 * time.Second},
		},
		Default: &lease.DomainLimits{MaxConcurrent: 10},
	}
	if diff := cmp.Diff(want, Resolve(p)); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
}

type statsStore struct{ stats []lease.RuleStats }

func (statsStore) SetCrawlPolicy(lease.CrawlPolicy)                      {}
func (statsStore) DeleteCrawlPolicy(cache.ObjectName)                    {}
func (s statsStore) CrawlPolicyStats(cache.ObjectName) []lease.RuleStats { return s.stats }

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
	store := statsStore{stats: []lease.RuleStats{{Host: "shop.example", InUse: 2, Waited: 5, Refused: 1}, {Host: "*", InUse: 1, Waited: 0, Refused: 3}}}
	w := NewStatusWriter(client, informer.Lister(), store, 0)
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
