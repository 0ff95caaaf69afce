package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Condition reasons; the event reasons share these names.
const (
	// Provisioned reasons.
	ReasonCreated            = "Created"
	ReasonExternalEndpoint   = "ExternalEndpoint"
	ReasonProvisioning       = "Provisioning"
	ReasonReplacing          = "Replacing"
	ReasonDeleting           = "Deleting"
	ReasonQuotaExceeded      = "QuotaExceeded"
	ReasonPermanentError     = "PermanentError"
	ReasonProviderNotEnabled = "ProviderNotEnabled"
	ReasonCloudInitError     = "CloudInitError"
	ReasonCredentialsError   = "CredentialsError"
	// Healthy reasons.
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	// LeaseBound's reasons: the health.LeaseCheck the probe found.
	ReasonInstanceChecksLeases = string(health.LeaseChecked)
	ReasonNoLeaseKey           = string(health.LeaseNoKey)
	ReasonInstanceDoesNotCheck = string(health.LeaseNotChecked)
	// Event-only reasons.
	ReasonDeleted          = "Deleted"
	ReasonInstanceVanished = "InstanceVanished"
	ReasonInstanceStopped  = "InstanceStopped"
	// ReasonInterrupted is the event of an interruption notice, and the
	// drain-reason annotation it writes.
	ReasonInterrupted   = "Interrupted"
	ReasonProviderError = "ProviderError"
	ReasonHealthy       = "Healthy"
	ReasonUnhealthy     = "Unhealthy"
)

// statusWriteTimeout bounds the one status write of a sync.
const statusWriteTimeout = 30 * time.Second

// updateStatusIfChanged writes p's status when it differs semantically from
// what the cache held: the only status write of a sync, and none at all for
// a proxy whose state did not change.
func (c *Controller) updateStatusIfChanged(ctx context.Context, cached, p *crawlv1alpha1.Proxy) error {
	p.Status.ObservedGeneration = p.Generation
	p.Status.Phase = computePhase(p)
	if equality.Semantic.DeepEqual(cached.Status, p.Status) {
		return nil
	}
	if cached.Status.Phase != p.Status.Phase {
		klog.FromContext(ctx).V(2).Info("Phase changed", "from", cached.Status.Phase, "to", p.Status.Phase)
	}
	ctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	defer cancel()
	updated, err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile (our finalizer removal, say)
	}
	if err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	c.remember(updated)
	return nil
}

// computePhase derives the phase from the conditions; it is a pure function
// of the object so that every writer agrees.
func computePhase(p *crawlv1alpha1.Proxy) crawlv1alpha1.ProxyPhase {
	if p.DeletionTimestamp != nil {
		return crawlv1alpha1.PhaseDeleting
	}
	provisioned := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	switch {
	case provisioned == nil:
		return crawlv1alpha1.PhasePending
	case provisioned.Status == metav1.ConditionFalse &&
		(provisioned.Reason == ReasonPermanentError || provisioned.Reason == ReasonProviderNotEnabled):
		return crawlv1alpha1.PhaseFailed
	case provisioned.Status != metav1.ConditionTrue:
		return crawlv1alpha1.PhaseProvisioning
	}
	healthy := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	switch {
	case healthy != nil && healthy.Status == metav1.ConditionTrue:
		return crawlv1alpha1.PhaseReady
	case healthy != nil && healthy.Status == metav1.ConditionFalse:
		return crawlv1alpha1.PhaseUnhealthy
	case p.Spec.Mode == crawlv1alpha1.ModeExternal:
		return crawlv1alpha1.PhasePending // reachable, not yet probed
	default:
		return crawlv1alpha1.PhaseProvisioning // running, not yet proven to serve
	}
}

// applyHealth stages the health engine's latest reported verdict, if it was
// measured against the address the status holds now (a verdict about a
// replaced instance must not make its successor Ready).
func (c *Controller) applyHealth(ctx context.Context, p *crawlv1alpha1.Proxy) {
	if c.health == nil {
		return
	}
	v, ok := c.health.Verdict(cache.MetaObjectToName(p))
	addr, hasAddr := proxyaccess.StatusAddress(p)
	if !ok || !hasAddr || v.Address != addr {
		return
	}
	status, reason := metav1.ConditionFalse, ReasonProbeFailed
	if v.Healthy {
		status, reason = metav1.ConditionTrue, ReasonProbeSucceeded
	}
	was := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	c.setCondition(p, crawlv1alpha1.ConditionHealthy, status, reason, v.Message)
	p.Status.LatencyMillis = v.Latency.Milliseconds()
	if v.Healthy {
		p.Status.ExitIP, p.Status.ExitCountry = v.ExitIP, v.ExitCountry
		c.stageLeaseBound(p, v.Lease)
	}
	checked := metav1.NewTime(v.CheckedAt.Truncate(time.Second))
	p.Status.LastHealthCheckTime = &checked

	if was == nil || was.Status != status {
		logger := klog.FromContext(ctx)
		if v.Healthy {
			logger.Info("Proxy is healthy", "latency", v.Latency)
			c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonHealthy, "Probe succeeded: %s", v.Message)
		} else {
			logger.Info("Proxy is unhealthy", "reason", v.Message)
			c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonUnhealthy, "Probe failed: %s", v.Message)
		}
	}
}

// stageLeaseBound stages the LeaseBound condition from what the latest
// successful probe found: whether a lease on the proxy is a key or only a
// promise (docs/api.md, "What a lease guarantees").
func (c *Controller) stageLeaseBound(p *crawlv1alpha1.Proxy, check health.LeaseCheck) {
	secret := proxyaccess.CredentialsSecret(p)
	switch check {
	case health.LeaseChecked:
		c.setCondition(p, crawlv1alpha1.ConditionLeaseBound, metav1.ConditionTrue, ReasonInstanceChecksLeases,
			"the instance checks lease credentials: a lease's admit only while the lease lives")
	case health.LeaseNoKey:
		msg := "the proxy takes no credentials: leases on it are advisory"
		if secret != "" {
			msg = fmt.Sprintf("credentials Secret %q holds no %s: leases on the proxy are advisory (their credentials outlive them)", secret, leasecred.SecretKey)
		}
		c.setCondition(p, crawlv1alpha1.ConditionLeaseBound, metav1.ConditionFalse, ReasonNoLeaseKey, msg)
	case health.LeaseNotChecked:
		c.setCondition(p, crawlv1alpha1.ConditionLeaseBound, metav1.ConditionFalse, ReasonInstanceDoesNotCheck, fmt.Sprintf(
			"the instance does not say it checks the %s of Secret %q (it is not our forward-proxy started with it: squid, a proxy network, an older image): leases on the proxy are advisory",
			leasecred.SecretKey, secret))
	}
}

// setProvisioned stages the Provisioned condition; true when its status or
// reason changed (a transition worth an event).
func (c *Controller) setProvisioned(p *crawlv1alpha1.Proxy, status metav1.ConditionStatus, reason, message string) bool {
	return c.setCondition(p, crawlv1alpha1.ConditionProvisioned, status, reason, message)
}

func (c *Controller) setCondition(p *crawlv1alpha1.Proxy, condType string, status metav1.ConditionStatus, reason, message string) bool {
	was := meta.FindStatusCondition(p.Status.Conditions, condType)
	transition := was == nil || was.Status != status || was.Reason != reason
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: p.Generation,
		LastTransitionTime: metav1.NewTime(c.clock.Now().Truncate(time.Second)),
	})
	return transition
}

func conditionReasonIs(p *crawlv1alpha1.Proxy, condType, reason string) bool {
	cond := meta.FindStatusCondition(p.Status.Conditions, condType)
	return cond != nil && cond.Reason == reason
}

// clearInstance forgets the current instance: the next pass creates one.
func clearInstance(p *crawlv1alpha1.Proxy) {
	p.Status.ProviderID, p.Status.IP, p.Status.Port = "", "", 0
	p.Status.ExitRanges = nil
	clearHealth(p)
}

// nonEmpty is ranges, or nil for none, so that an instance without exit
// ranges leaves status.exitRanges out rather than writing an empty list.
func nonEmpty(ranges []string) []string {
	if len(ranges) == 0 {
		return nil
	}
	return slices.Clone(ranges)
}

// clearHealth drops the verdict of an instance that is going away.
func clearHealth(p *crawlv1alpha1.Proxy) {
	meta.RemoveStatusCondition(&p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	meta.RemoveStatusCondition(&p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound)
	p.Status.LatencyMillis = 0
	p.Status.ExitIP, p.Status.ExitCountry = "", ""
	p.Status.LastHealthCheckTime = nil
}
