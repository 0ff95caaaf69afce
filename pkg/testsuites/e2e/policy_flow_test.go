package e2e_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

const policyName = "polite"

// policyFlow: a CrawlPolicy gets its status from the leader (the rules the
// lease store applies, for the generation it applies), and each rule added
// later shows there within seconds (the feed pokes the status writer).
func (r *operatorRun) policyFlow() flow {
	applied := func(rules int32) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			p, err := r.s.crawl.CrawlV1alpha1().CrawlPolicies(r.proxies).Get(ctx, policyName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.ObservedGeneration != p.Generation || p.Status.RuleCount != rules {
				return fmt.Errorf("status %+v for generation %d, want %d rules", p.Status, p.Generation, rules)
			}
			return nil
		}
	}
	rule := func(host string) crawlv1alpha1.DomainRule {
		return crawlv1alpha1.DomainRule{Host: host, DomainLimits: crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To[int32](3)}}
	}
	steps := []step{{
		name: "status written",
		act: func(ctx context.Context) error {
			_, err := r.s.crawl.CrawlV1alpha1().CrawlPolicies(r.proxies).Create(ctx, &crawlv1alpha1.CrawlPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: policyName},
				Spec:       crawlv1alpha1.CrawlPolicySpec{Rules: []crawlv1alpha1.DomainRule{rule("site-0.example")}},
			}, metav1.CreateOptions{})
			return err
		},
		done:  applied(1),
		bound: 10 * time.Second,
	}}
	// Several edits in a row, as for the external flow: an operator that
	// relists with backoff (no watch) falls further behind at each.
	for i := 1; i <= editsInARow; i++ {
		steps = append(steps, step{
			name: fmt.Sprintf("status follows rule edit %d", i),
			act: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().CrawlPolicies(r.proxies).Get(ctx, policyName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Spec.Rules = append(p.Spec.Rules, rule(fmt.Sprintf("site-%d.example", i)))
				_, err = r.s.crawl.CrawlV1alpha1().CrawlPolicies(r.proxies).Update(ctx, p, metav1.UpdateOptions{})
				return err
			},
			done:  applied(int32(i + 1)),
			bound: editBound,
		})
	}
	return flow{name: "policy", steps: steps}
}
