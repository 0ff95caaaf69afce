package crawlpolicy

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
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
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "polite", Generation: 2, UID: "polite-uid"}}
	// A previous leader counted these; this process adds to them.
	p.Status.Rules = []crawlv1alpha1.DomainRuleStatus{{Host: "shop.example", Outcomes: crawlv1alpha1.OutcomeCounts{OK: 90, Banned: 5}}}
	client := fake.NewSimpleClientset(p)
	factory := crawlinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Crawl().V1alpha1().CrawlPolicies()
	if err := informer.Informer().GetIndexer().Add(p); err != nil {
		t.Fatal(err)
	}
	stats := statsStore{stats: []store.RuleStats{
		{Host: "shop.example", InUse: 2, Waited: 5, Refused: 1, Outcomes: store.Outcomes{OK: 10, Banned: 5},
			Tier: "residential", Tiers: []store.TierStats{{Name: "own-vms", Grants: 7, Outcomes: store.Outcomes{OK: 2, Banned: 5}}, {Name: "residential", Grants: 8, Outcomes: store.Outcomes{OK: 8}}}},
		{Host: "*", InUse: 1, Waited: 0, Refused: 3, Outcomes: store.Outcomes{Error: 1},
			Tiers:          []store.TierStats{{Name: "own-vms", Grants: 1}, {Name: "residential"}},
			BusiestDomains: []store.DomainTier{{Domain: "a.example", Tier: "own-vms", Grants: 1}}},
	}}
	w := NewStatusWriter(client, informer.Lister(), stats, 0)
	w.writeAll(context.Background())
	got, err := client.CrawlV1alpha1().CrawlPolicies("crawl").Get(context.Background(), "polite", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := crawlv1alpha1.CrawlPolicyStatus{ObservedGeneration: 2, RuleCount: 2, InUse: 3, Waited: 5, Refused: 4,
		Outcomes:   crawlv1alpha1.OutcomeCounts{OK: 100, Banned: 10, Error: 1, SuccessRate: "90.1%"},
		Conditions: []metav1.Condition{{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Applied", Message: "every field is applied as written", ObservedGeneration: 2}},
		Rules: []crawlv1alpha1.DomainRuleStatus{
			{Host: "shop.example", InUse: 2, Waited: 5, Refused: 1, Outcomes: crawlv1alpha1.OutcomeCounts{OK: 100, Banned: 10, SuccessRate: "90.9%"},
				CurrentTier: "residential", Tiers: []crawlv1alpha1.TierStatus{
					{Name: "own-vms", Grants: 7, Outcomes: crawlv1alpha1.OutcomeCounts{OK: 2, Banned: 5, SuccessRate: "28.6%"}},
					{Name: "residential", Grants: 8, Outcomes: crawlv1alpha1.OutcomeCounts{OK: 8, SuccessRate: "100.0%"}}}},
			{Host: "*", InUse: 1, Refused: 3, Outcomes: crawlv1alpha1.OutcomeCounts{Error: 1, SuccessRate: "0.0%"},
				Tiers:          []crawlv1alpha1.TierStatus{{Name: "own-vms", Grants: 1}, {Name: "residential"}},
				BusiestDomains: []crawlv1alpha1.DomainTierStatus{{Domain: "a.example", Tier: "own-vms", Grants: 1}}},
		}}
	if diff := cmp.Diff(want, got.Status, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
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

// TestValidNamesTheBanRuleField: a ban rule pattern that is not RE2 makes
// Valid False with the field's path; a valid policy is Valid.
func TestValidNamesTheBanRuleField(t *testing.T) {
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	p.Spec.Rules = []crawlv1alpha1.DomainRule{
		{Host: "shop.example", DomainLimits: crawlv1alpha1.DomainLimits{BanDetection: &crawlv1alpha1.BanDetection{BodyPatterns: []string{"ok", "(unclosed"}}}},
	}
	st := StatusFrom(p, nil, nil)
	c := meta.FindStatusCondition(st.Conditions, "Valid")
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "InvalidField" || !strings.Contains(c.Message, "spec.rules[0].banDetection.bodyPatterns[1]") {
		t.Fatalf("Valid condition %+v, want False naming spec.rules[0].banDetection.bodyPatterns[1]", c)
	}
	p.Spec.Rules[0].BanDetection.BodyPatterns = []string{"ok"}
	if c := meta.FindStatusCondition(StatusFrom(p, nil, nil).Conditions, "Valid"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Valid condition %+v after the fix, want True", c)
	}
}

// TestValidNamesTheTierSelectorField: a tier selector labels refuses (the
// schema cannot check operators) makes Valid False with the field's path.
func TestValidNamesTheTierSelectorField(t *testing.T) {
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	p.Spec.Default = &crawlv1alpha1.DomainLimits{Tiers: []crawlv1alpha1.ProxyTier{
		{Name: "own-vms", Selector: metav1.LabelSelector{MatchLabels: map[string]string{crawlv1alpha1.PoolLabel: "own-vms"}}},
		{Name: "residential", Selector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: crawlv1alpha1.PoolLabel, Operator: "Near"}}}},
	}}
	c := meta.FindStatusCondition(StatusFrom(p, nil, nil).Conditions, "Valid")
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "spec.default.tiers[1].selector") {
		t.Fatalf("Valid condition %+v, want False naming spec.default.tiers[1].selector", c)
	}
}
