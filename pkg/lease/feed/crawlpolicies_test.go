package feed

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/tier"
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

// TieringFrom: tiers in order with their selectors, settings with their
// defaults, and a field that cannot be applied named in the error.
func TestTieringFrom(t *testing.T) {
	pool := func(name string) crawlv1alpha1.ProxyTier {
		return crawlv1alpha1.ProxyTier{Name: name, Selector: metav1.LabelSelector{MatchLabels: map[string]string{crawlv1alpha1.PoolLabel: name}}}
	}
	type result struct {
		Names, Selectors []string
		Config           tier.Config
		Err              string
	}
	tests := map[string]struct {
		limits crawlv1alpha1.DomainLimits
		want   result
	}{
		"no tiers": {limits: crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To[int32](1)}},
		"defaults": {
			limits: crawlv1alpha1.DomainLimits{Tiers: []crawlv1alpha1.ProxyTier{pool("own-vms"), pool("residential")}},
			want: result{Names: []string{"own-vms", "residential"},
				Selectors: []string{"crawl.proxyfleet.io/pool=own-vms", "crawl.proxyfleet.io/pool=residential"}, Config: tier.Config{}.WithDefaults()},
		},
		"settings": {
			limits: crawlv1alpha1.DomainLimits{Tiers: []crawlv1alpha1.ProxyTier{pool("a"), pool("b")}, Tiering: &crawlv1alpha1.Tiering{
				Window: &metav1.Duration{Duration: time.Minute}, BanRateThreshold: "0.3", MinOutcomes: ptr.To[int32](10),
				QuietPeriod: &metav1.Duration{Duration: time.Hour}, ProbeShare: "0.1"}},
			want: result{Names: []string{"a", "b"}, Selectors: []string{"crawl.proxyfleet.io/pool=a", "crawl.proxyfleet.io/pool=b"},
				Config: tier.Config{Window: time.Minute, BanRateThreshold: 0.3, MinOutcomes: 10, QuietPeriod: time.Hour, ProbeShare: 0.1}},
		},
		"bad selector": {
			limits: crawlv1alpha1.DomainLimits{Tiers: []crawlv1alpha1.ProxyTier{pool("a"), {Name: "b", Selector: metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}}}}},
			want: result{Err: "spec.default.tiers[1].selector"},
		},
		"bad threshold": {
			limits: crawlv1alpha1.DomainLimits{Tiers: []crawlv1alpha1.ProxyTier{pool("a"), pool("b")}, Tiering: &crawlv1alpha1.Tiering{BanRateThreshold: "2"}},
			want:   result{Err: "spec.default.tiering.banRateThreshold"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tg, err := TieringFrom(tc.limits, "spec.default")
			var got result
			if err != nil {
				got.Err = err.Error()
				if tc.want.Err != "" && strings.HasPrefix(got.Err, tc.want.Err) {
					got.Err = tc.want.Err // the field named; the rest is labels' wording
				}
			}
			if tg != nil {
				got.Names, got.Config = tg.Names, tg.Config
				for _, s := range tg.Selectors {
					got.Selectors = append(got.Selectors, s.String())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("TieringFrom (-want +got):\n%s", diff)
			}
		})
	}
}
