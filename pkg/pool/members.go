package pool

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

func (c *Controller) createMember(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string) error {
	return c.createProxy(ctx, pool, revision, *pool.Spec.Template.Spec.DeepCopy(), "")
}

// createProxy creates a member with spec; instance names the shared
// instance it is a session on, "" for a member of its own.
func (c *Controller) createProxy(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string, spec crawlv1alpha1.ProxySpec, instance string) error {
	key := cache.MetaObjectToName(pool)
	for range 3 { // a name clash is rare: retry with a new suffix
		name := pool.Name + "-" + randomSuffix()
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{
				Name:            name,
				Namespace:       pool.Namespace,
				Labels:          memberLabels(pool, revision),
				Annotations:     copyMap(pool.Spec.Template.Metadata.Annotations),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, crawlv1alpha1.SchemeGroupVersion.WithKind("ProxyPool"))},
			},
			Spec: spec,
		}
		c.pending.expect(key, name, pendingOp{kind: opCreate, at: c.clock.Now(), revision: revision, instance: instance})
		_, err := c.crawl.CrawlV1alpha1().Proxies(pool.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			c.pending.forget(key, name)
			continue
		}
		if err != nil {
			c.pending.forget(key, name)
			return fmt.Errorf("creating member: %w", err)
		}
		klog.FromContext(ctx).Info("Created member", "member", name, "revision", revision, "instance", instance)
		if instance != "" {
			c.recorder.Eventf(pool, corev1.EventTypeNormal, EventMemberCreated, "Created member %s (revision %s), a session on instance %s", name, revision, instance)
			return nil
		}
		c.recorder.Eventf(pool, corev1.EventTypeNormal, EventMemberCreated, "Created member %s (revision %s)", name, revision)
		return nil
	}
	return errors.New("creating member: three name clashes in a row")
}

func (c *Controller) drainMember(ctx context.Context, pool *crawlv1alpha1.ProxyPool, p *crawlv1alpha1.Proxy, r Removal, now time.Time) error {
	if p == nil {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		crawlv1alpha1.DrainingAnnotation, now.UTC().Format(time.RFC3339), crawlv1alpha1.DrainReasonAnnotation, string(r.Reason))
	key := cache.MetaObjectToName(pool)
	c.pending.expect(key, p.Name, pendingOp{kind: opDrain, at: now})
	_, err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		c.pending.forget(key, p.Name)
		return nil
	}
	if err != nil {
		c.pending.forget(key, p.Name)
		return fmt.Errorf("marking member %s draining: %w", p.Name, err)
	}
	c.metrics.ObservePoolRemoval(pool.Namespace, pool.Name, string(r.Reason))
	c.noteRecycle(ctx, pool, p, r.Reason, r.Evidence)
	if r.Reason == ReasonDuplicateExitIP || r.Reason == ReasonExitCountryMismatch {
		// Told on the member too: kubectl describe px shows why it goes.
		c.recorder.Eventf(p, corev1.EventTypeNormal, string(r.Reason), "Re-rolled by pool %s: %s; a new member replaces it", pool.Name, r.Evidence)
	}
	leases := "an unknown number of leases (the lease API is not leading)"
	if r.Leases >= 0 {
		leases = fmt.Sprintf("%d lease(s)", r.Leases)
	}
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventDraining, "Draining member %s: %s; it takes no new lease, keeps %s, and goes when they end or drainTimeout passes",
		p.Name, describeReason(r.Reason, p, pool, c.providers), leases)
	return nil
}

func (c *Controller) deleteMember(ctx context.Context, pool *crawlv1alpha1.ProxyPool, p *crawlv1alpha1.Proxy, d Deletion) error {
	if p == nil {
		return nil
	}
	key := cache.MetaObjectToName(pool)
	c.pending.expect(key, p.Name, pendingOp{kind: opDelete, at: c.clock.Now()})
	uid := p.UID
	err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.pending.forget(key, p.Name)
		return fmt.Errorf("deleting member %s: %w", p.Name, err)
	}
	reason := d.Reason
	if reason == "" {
		reason = Reason(p.Annotations[crawlv1alpha1.DrainReasonAnnotation])
	} else {
		c.metrics.ObservePoolRemoval(pool.Namespace, pool.Name, string(reason))
		c.noteRecycle(ctx, pool, p, reason, d.Evidence)
	}
	klog.FromContext(ctx).Info("Deleted member", "member", p.Name, "why", d.Why, "reason", reason)
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventMemberDeleted, "Deleted member %s (%s): %s", p.Name, d.Why, describeReason(reason, p, pool, c.providers))
	return nil
}

func describeReason(r Reason, p *crawlv1alpha1.Proxy, pool *crawlv1alpha1.ProxyPool, providers provider.Set) string {
	switch r {
	case ReasonOutOfDate:
		return fmt.Sprintf("replaced because out of date (revision %s, current %s)", p.Labels[crawlv1alpha1.PoolRevisionLabel], pool.Status.Revision)
	case ReasonTooOld:
		created := p.CreationTimestamp.UTC().Format(time.RFC3339)
		if _, limit := maxAgeOf(pool, providers); limit != nil {
			return fmt.Sprintf("replaced %s (created %s, spec.template.spec.%s)", limit.Why, created, limit.Setting)
		}
		return fmt.Sprintf("replaced because too old (created %s, maxAge %s)", created, pool.Spec.MaxAge.Duration)
	case ReasonDuplicateExitIP:
		return fmt.Sprintf("re-rolled: its exit IP %s is an older member's too", p.Status.ExitIP)
	case ReasonExitCountryMismatch:
		return fmt.Sprintf("re-rolled: its exit IP %s is in %s, not the %s its network was asked for", p.Status.ExitIP, p.Status.ExitCountry, providers.AskedCountry(p))
	case ReasonUnhealthy:
		return fmt.Sprintf("replaced because Unhealthy longer than unhealthyTimeout %s", pool.Spec.Remediation.UnhealthyTimeout.Duration)
	case ReasonScaledDown:
		return "scaled down"
	case ReasonBurned, ReasonUsedUp:
		return "recycled by spec.recycle (" + string(r) + ")"
	default:
		return "removed"
	}
}

// randomSuffix is five characters of the alphabet Kubernetes' generateName
// uses (no vowels, no look-alikes).
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
