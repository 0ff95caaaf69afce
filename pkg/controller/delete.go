package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// reconcileDelete deletes the instance of a Proxy being deleted and then
// releases the finalizer, so the object goes only once its instance has.
func (c *Controller) reconcileDelete(ctx context.Context, p *crawlv1alpha1.Proxy) (time.Duration, error) {
	if !hasFinalizer(p) {
		return done, nil
	}
	if p.Status.ProviderID == "" {
		found, err := c.findUnrecordedInstance(ctx, p)
		if err != nil {
			return c.deleteFailure(ctx, p, "list", err)
		}
		if !found {
			return done, c.removeFinalizer(ctx, p)
		}
	}
	id := p.Status.ProviderID
	ref, ok := c.recordedInstance(p)
	if !ok {
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProviderNotEnabled, fmt.Sprintf(
			"cannot delete instance %s: its provider is not enabled in this operator; enable it, or remove the finalizer %s to abandon the instance",
			id, crawlv1alpha1.Finalizer))
		return done, nil
	}

	inst, err := ref.prov.Get(ctx, ref.id)
	c.metrics.ObserveProviderCall(ref.providerName, "get", err)
	if errors.Is(err, provider.ErrNotFound) {
		// Gone, but only a Delete that succeeded also took what the provider
		// made beside the instance (the kubernetes provider's cloud-init
		// Secret and NetworkPolicy). After a failed Delete, or when the
		// instance went by itself, Delete runs (again) first, so the
		// finalizer never goes while those are left.
		if !deleteSucceeded(p) {
			if err := c.deleteInstance(ctx, ref); err != nil {
				return c.deleteFailure(ctx, p, "delete", err)
			}
		}
		klog.FromContext(ctx).Info("Deleted instance", "instance", id)
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonDeleted, "Deleted instance %s", id)
		return done, c.removeFinalizer(ctx, p)
	}
	if err != nil {
		return c.deleteFailure(ctx, p, "get", err)
	}
	if err := c.deleteUnlessGoing(ctx, p, ref, inst); err != nil {
		return c.deleteFailure(ctx, p, "delete", err)
	}
	clearHealth(p)
	c.setProvisioned(p, metav1.ConditionFalse, ReasonDeleting, fmt.Sprintf("deleting instance %s", id))
	return c.deletionPoll, nil
}

// deleteFailure is providerFailure for a Proxy being deleted. A spec edit
// cannot help a deletion, so a permanent error is not latched: it keeps its
// condition and event and is retried with the queue's backoff, like a
// transient one.
func (c *Controller) deleteFailure(ctx context.Context, p *crawlv1alpha1.Proxy, op string, err error) (time.Duration, error) {
	requeue, retryErr := c.providerFailure(ctx, p, op, err)
	if retryErr == nil && provider.Class(err) == provider.ErrPermanent {
		return done, fmt.Errorf("provider %s %s while deleting: %w", p.Spec.Provider, op, err)
	}
	return requeue, retryErr
}

func (c *Controller) removeFinalizer(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	return c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == crawlv1alpha1.Finalizer })
	})
}

// findUnrecordedInstance looks for an instance of p that status does not
// record: one created just before a crash, or while the status write that
// would have recorded it failed (an API server outage), with the Proxy
// deleted before a retry adopted it. It carries p's proxy-uid tag, so the
// provider finds it; when it does, it is recorded in p's status and deleted
// like any other, and the object goes only after it. Without an enabled
// provider there is nothing to ask, and pkg/gc remains the backstop.
func (c *Controller) findUnrecordedInstance(ctx context.Context, p *crawlv1alpha1.Proxy) (bool, error) {
	prov, ok := c.providers[p.Spec.Provider]
	if p.Spec.Mode == crawlv1alpha1.ModeExternal || !ok {
		return false, nil
	}
	found, err := prov.ListByTag(ctx, crawlv1alpha1.TagProxyUID, string(p.UID))
	c.metrics.ObserveProviderCall(string(p.Spec.Provider), "list", err)
	if err != nil || len(found) == 0 {
		return false, err
	}
	// Names derive from the UID, so there is one; should there be more,
	// pkg/gc collects the rest once the object is gone.
	p.Status.ProviderID = provider.ProviderID(string(p.Spec.Provider), found[0].ID)
	klog.FromContext(ctx).Info("Found an instance the status did not record; deleting it", "instance", p.Status.ProviderID)
	return true, nil
}
