package e2e_test

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

const poolName = "fleet"

// poolFlow: a ProxyPool of one gets a member Proxy it owns, its status
// counts the member Ready, and scaling it to zero through the scale
// subresource drains the member and deletes it; scaled back to one, it gets
// a new member at once, and scaled to two another; with spec.autoscaling
// (minReplicas 3) the operator itself writes spec.replicas 3 through the
// scale subresource.
func (r *operatorRun) poolFlow() flow {
	members := func(ctx context.Context) ([]crawlv1alpha1.Proxy, error) {
		list, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolLabel + "=" + poolName})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	scaleStep := func(name string, replicas int32, bound time.Duration) step {
		return step{
			name: name,
			act: func(ctx context.Context) error {
				_, err := r.s.crawl.CrawlV1alpha1().ProxyPools(r.proxies).UpdateScale(ctx, poolName,
					&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: r.proxies}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}},
					metav1.UpdateOptions{})
				return err
			},
			done: func(ctx context.Context) error {
				ms, err := members(ctx)
				if err != nil {
					return err
				}
				if len(ms) != int(replicas) {
					return fmt.Errorf("%d members, want %d", len(ms), replicas)
				}
				return nil
			},
			bound: bound,
		}
	}
	return flow{name: "pool", steps: []step{
		{
			name: "member created",
			act: func(ctx context.Context) error {
				template := r.managedProxy("unused", cloudInitSecret).Spec
				_, err := r.s.crawl.CrawlV1alpha1().ProxyPools(r.proxies).Create(ctx, &crawlv1alpha1.ProxyPool{
					ObjectMeta: metav1.ObjectMeta{Name: poolName},
					Spec:       crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](1), Template: crawlv1alpha1.ProxyTemplate{Spec: template}},
				}, metav1.CreateOptions{})
				return err
			},
			done: func(ctx context.Context) error {
				ms, err := members(ctx)
				if err != nil {
					return err
				}
				if len(ms) != 1 || metav1.GetControllerOf(&ms[0]) == nil {
					return fmt.Errorf("%d members", len(ms))
				}
				return nil
			},
			bound: 10 * time.Second,
		},
		{
			name: "pool status counts the member Ready",
			done: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().ProxyPools(r.proxies).Get(ctx, poolName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Status.ReadyReplicas != 1 || p.Status.Selector == "" {
					return fmt.Errorf("status %+v", p.Status)
				}
				return nil
			},
			bound: 30 * time.Second,
		},
		// Scaled to zero, the member drains and goes. Scaled back up, each new
		// member must come at once: that needs the watch, since without it
		// the informer relists with a growing backoff, and two prompt
		// answers in a row cannot both be relists.
		scaleStep("scaled to zero: the member drained and deleted", 0, 30*time.Second),
		scaleStep("scaled back to one: a new member at once", 1, 10*time.Second),
		scaleStep("scaled to two: another member at once", 2, 10*time.Second),
		// With spec.autoscaling the operator owns spec.replicas: minReplicas 3
		// with no demand asks for 3, written through the scale subresource.
		{
			name: "autoscaling: the operator scales to minReplicas",
			act: func(ctx context.Context) error {
				patch := []byte(`{"spec":{"autoscaling":{"minReplicas":3,"maxReplicas":3}}}`)
				_, err := r.s.crawl.CrawlV1alpha1().ProxyPools(r.proxies).Patch(ctx, poolName, types.MergePatchType, patch, metav1.PatchOptions{})
				return err
			},
			done: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().ProxyPools(r.proxies).Get(ctx, poolName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				ms, err := members(ctx)
				if err != nil {
					return err
				}
				if ptr.Deref(p.Spec.Replicas, 0) != 3 || len(ms) != 3 {
					return fmt.Errorf("spec.replicas %d, %d members, want 3 (%v)", ptr.Deref(p.Spec.Replicas, 0), len(ms), p.Status.Conditions)
				}
				return nil
			},
			bound: 30 * time.Second,
		},
	}}
}
