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
	id := p.Status.ProviderID
	if id == "" {
		// Nothing was recorded; an instance created just before a crash is
		// an orphan that pkg/gc collects.
		return done, c.removeFinalizer(ctx, p)
	}
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
		klog.FromContext(ctx).Info("Deleted instance", "instance", id)
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonDeleted, "Deleted instance %s", id)
		return done, c.removeFinalizer(ctx, p)
	}
	if err != nil {
		return c.providerFailure(ctx, p, "get", err)
	}
	if err := c.deleteUnlessGoing(ctx, p, ref, inst); err != nil {
		return c.providerFailure(ctx, p, "delete", err)
	}
	clearHealth(p)
	c.setProvisioned(p, metav1.ConditionFalse, ReasonDeleting, fmt.Sprintf("deleting instance %s", id))
	return c.deletionPoll, nil
}

func (c *Controller) removeFinalizer(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	return c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == crawlv1alpha1.Finalizer })
	})
}
