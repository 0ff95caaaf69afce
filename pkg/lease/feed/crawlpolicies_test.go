package feed

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// CrawlPolicyFrom: rules by host, the default, unset limits unbound.
func TestCrawlPolicyFrom(t *testing.T) {
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
	want := store.CrawlPolicy{
		Key: store.ObjectName{Namespace: "crawl", Name: "polite"},
		Rules: map[string]store.DomainLimits{
			"shop.example":   {MaxConcurrent: 3},
			"*.news.example": {MinInterval: 200 * time.Millisecond, MinIntervalPerProxy: 5 * time.Second},
		},
		Default: &store.DomainLimits{MaxConcurrent: 10},
	}
	if diff := cmp.Diff(want, CrawlPolicyFrom(p)); diff != "" {
		t.Errorf("CrawlPolicyFrom (-want +got):\n%s", diff)
	}
}
