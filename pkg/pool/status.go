package pool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// stageStatus computes the pool's status from the plan.
func (c *Controller) stageStatus(pool *crawlv1alpha1.ProxyPool, pol Policy, plan Plan, revision string) {
	n := plan.Counts
	s := &pool.Status
	wasComplete := meta.IsStatusConditionFalse(s.Conditions, crawlv1alpha1.PoolConditionProgressing) &&
		meta.FindStatusCondition(s.Conditions, crawlv1alpha1.PoolConditionProgressing).Reason == "Complete"
	s.Replicas = int32(n.Total - n.Deleting)
	s.ReadyReplicas = int32(n.Ready)
	s.AvailableReplicas = int32(n.Available)
	s.UpdatedReplicas = int32(n.Updated)
	s.Selector = labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolLabel: pool.Name}).String()
	s.Revision = revision
	s.ObservedGeneration = pool.Generation

	if n.Available >= n.MinAvailable {
		setCondition(pool, crawlv1alpha1.PoolConditionAvailable, metav1.ConditionTrue, "MinimumAvailable",
			fmt.Sprintf("%d of %d members available (at least %d must be)", n.Available, pol.Replicas, n.MinAvailable))
	} else {
		setCondition(pool, crawlv1alpha1.PoolConditionAvailable, metav1.ConditionFalse, "BelowMinimum",
			fmt.Sprintf("%d of %d members available; at least %d should be", n.Available, pol.Replicas, n.MinAvailable))
	}
	if plan.Complete {
		setCondition(pool, crawlv1alpha1.PoolConditionProgressing, metav1.ConditionFalse, "Complete",
			fmt.Sprintf("all %d members are up to date (revision %s)", pol.Replicas, revision))
		if !wasComplete && (n.Total > 0 || pol.Replicas == 0) {
			c.recorder.Eventf(pool, corev1.EventTypeNormal, EventRolloutComplete, "All %d members are up to date (revision %s)", pol.Replicas, revision)
		}
	} else {
		msg := fmt.Sprintf("%d of %d members up to date, %d draining, %d out of date", n.Updated, pol.Replicas, n.Draining, n.OutOfDate)
		if plan.Waiting != "" {
			msg += "; " + plan.Waiting
		}
		setCondition(pool, crawlv1alpha1.PoolConditionProgressing, metav1.ConditionTrue, "RollingOut", msg)
	}
	if plan.RemediationPaused {
		msg := fmt.Sprintf("%d of %d members are Unhealthy, more than maxUnhealthy (%d): the probe target or the network is the likely fault, not the proxies; replacing none",
			n.Unhealthy, pol.Replicas, pol.MaxUnhealthy)
		if setCondition(pool, crawlv1alpha1.PoolConditionRemediationAllowed, metav1.ConditionFalse, "TooManyUnhealthy", msg) {
			c.recorder.Event(pool, corev1.EventTypeWarning, EventRemediationPaused, msg)
		}
	} else {
		setCondition(pool, crawlv1alpha1.PoolConditionRemediationAllowed, metav1.ConditionTrue, "WithinMaxUnhealthy",
			fmt.Sprintf("%d of %d members Unhealthy (maxUnhealthy %d)", n.Unhealthy, pol.Replicas, pol.MaxUnhealthy))
	}
}

// setCondition sets a condition and reports whether its status or reason changed.
func setCondition(pool *crawlv1alpha1.ProxyPool, typ string, status metav1.ConditionStatus, reason, msg string) bool {
	old := meta.FindStatusCondition(pool.Status.Conditions, typ)
	changed := old == nil || old.Status != status || old.Reason != reason
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation,
	})
	return changed
}

func (c *Controller) writeStatus(ctx context.Context, cached, pool *crawlv1alpha1.ProxyPool) error {
	if equality.Semantic.DeepEqual(cached.Status, pool.Status) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := c.crawl.CrawlV1alpha1().ProxyPools(pool.Namespace).UpdateStatus(ctx, pool, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		if apierrors.IsConflict(err) {
			c.queue.Add(cache.MetaObjectToName(pool)) // the newer object brings the key back anyway
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing pool status: %w", err)
	}
	c.recycle.written(cache.MetaObjectToName(pool), pool.Status.Recycled, cached.Status.Recycled)
	return nil
}
