package bandetect

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// TestRulesPickTheStoresRule: the detector of a domain is that of the rule
// the lease store charges it to, per namespace.
func TestRulesPickTheStoresRule(t *testing.T) {
	codes := func(c ...int32) *crawlv1alpha1.BanDetection { return &crawlv1alpha1.BanDetection{StatusCodes: c} }
	policy := func(ns, name string, def *crawlv1alpha1.BanDetection, rules ...crawlv1alpha1.DomainRule) *crawlv1alpha1.CrawlPolicy {
		p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		p.Spec.Rules = rules
		if def != nil {
			p.Spec.Default = &crawlv1alpha1.DomainLimits{BanDetection: def}
		}
		return p
	}
	rule := func(host string, b *crawlv1alpha1.BanDetection) crawlv1alpha1.DomainRule {
		return crawlv1alpha1.DomainRule{Host: host, DomainLimits: crawlv1alpha1.DomainLimits{BanDetection: b}}
	}
	r := NewRules()
	r.Set(policy("crawl", "b-site", nil, rule("shop.example", codes(503)), rule("*.example", codes(418)), rule("*.news.example", codes(451))))
	r.Set(policy("crawl", "a-default", codes(500)))
	r.Set(policy("other", "only", nil, rule("shop.example", codes(402))))

	for _, tc := range []struct {
		ns, domain string
		status     int
		want       bool
	}{
		{"crawl", "shop.example", 503, true},    // exact
		{"crawl", "shop.example", 418, false},   // exact beats suffix
		{"crawl", "a.news.example", 451, true},  // the longer suffix
		{"crawl", "a.news.example", 418, false}, //
		{"crawl", "example", 418, true},         // *.example covers example itself
		{"crawl", "elsewhere.org", 500, true},   // the default rule
		{"crawl", "elsewhere.org", 403, false},  // the default rule's codes only
		{"other", "shop.example", 402, true},    // per namespace
		{"other", "elsewhere.org", 403, true},   // no rule: Default
		{"nobody", "shop.example", 429, true},   // no policy: Default
		{"nobody", "shop.example", 503, false},  //
	} {
		got := r.For(tc.ns, tc.domain).Judge(Response{Status: tc.status}).Banned
		if got != tc.want {
			t.Errorf("%s/%s status %d: banned %v, want %v", tc.ns, tc.domain, tc.status, got, tc.want)
		}
	}
	r.Delete("crawl", "b-site")
	if !r.For("crawl", "shop.example").Judge(Response{Status: 500}).Banned {
		t.Errorf("after deleting b-site, shop.example is not judged by the remaining default rule")
	}
}
