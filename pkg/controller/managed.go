package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// reconcileManaged drives a Managed Proxy's instance toward its spec: create,
// adopt, replace, observe; every provider error is classified (provider.Quota, Permanent, Transient;
// docs/architecture.md, Flow 3).
func (c *Controller) reconcileManaged(ctx context.Context, p *crawlv1alpha1.Proxy) (time.Duration, error) {
	if !hasFinalizer(p) {
		// The update event brings the key back with the finalizer in the cache.
		return done, c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
			p.Finalizers = append(p.Finalizers, crawlv1alpha1.Finalizer)
		})
	}
	if permanentlyFailed(p) {
		return done, nil // silent until the spec changes
	}
	prov, ok := c.providers[p.Spec.Provider]
	if !ok {
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProviderNotEnabled,
			fmt.Sprintf("provider %q is not enabled in this operator (flag --providers)", p.Spec.Provider))
		return done, nil
	}

	cloudInit, err := c.resolveCloudInit(p)
	if err != nil {
		c.setProvisioned(p, metav1.ConditionFalse, ReasonCloudInitError, err.Error())
		return done, err
	}
	if proxyaccess.UsesGeneratedCredentials(p) {
		change, err := c.ensureGeneratedCredentials(ctx, p)
		if err != nil {
			c.refuseCredentials(p, err)
			return done, err
		}
		// After a change, the Secret's informer event brings the Proxy back
		// once the cache (which the providers and the prober read) holds it;
		// the poll is the fallback.
		switch change {
		case generatedCreated:
			c.setProvisioned(p, metav1.ConditionFalse, ReasonProvisioning, fmt.Sprintf(
				"generated credentials Secret %q (spec.auth is not set)", proxyaccess.GeneratedCredentialsSecret(p)))
			return c.provisioningPoll, nil
		case generatedMarked:
			// Nothing about the instance changed: the status stays as it is,
			// rather than flap while the cache still holds the unmarked copy.
			return c.provisioningPoll, nil
		}
	}
	credentials, err := c.credentialsDigest(p)
	if err != nil {
		c.refuseCredentials(p, err)
		return done, err
	}
	hash := instanceHash(c.registry, p, cloudInit, credentials)
	recorded := p.Annotations[crawlv1alpha1.SpecHashAnnotation]

	if p.Status.ProviderID == "" {
		return c.createInstance(ctx, p, prov, hash, cloudInit)
	}
	inst, ok := c.recordedInstance(p)
	if !ok {
		return done, nil
	}
	switch {
	case recorded == "":
		// An instance without a recorded hash (the annotation write was lost):
		// adopt it as built from the current spec rather than replace it.
		klog.FromContext(ctx).V(2).Info("Adopting instance", "instance", p.Status.ProviderID)
		return done, c.setSpecHash(ctx, p, hash)
	case recorded != hash:
		return c.replaceInstance(ctx, p, inst, hash)
	default:
		return c.observeInstance(ctx, p, inst)
	}
}

// instanceRef is status.providerID resolved: the provider that made the
// instance (not necessarily spec.provider, which may have changed since)
// and the instance's ID there.
type instanceRef struct {
	providerName string
	prov         provider.Provider
	id           string
}

// recordedInstance resolves status.providerID. When the maker is not enabled
// it stages ProviderNotEnabled and returns false: nothing can be done to the
// instance here.
func (c *Controller) recordedInstance(p *crawlv1alpha1.Proxy) (instanceRef, bool) {
	name, id, ok := provider.SplitProviderID(p.Status.ProviderID)
	if !ok { // recorded before IDs named their provider
		name, id = string(p.Spec.Provider), p.Status.ProviderID
	}
	prov, ok := c.providers[crawlv1alpha1.ProviderName(name)]
	if !ok {
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProviderNotEnabled, fmt.Sprintf(
			"instance %s was made by provider %q, which is not enabled in this operator (flag --providers)", p.Status.ProviderID, name))
		return instanceRef{}, false
	}
	return instanceRef{providerName: name, prov: prov, id: id}, true
}

func (c *Controller) createInstance(ctx context.Context, p *crawlv1alpha1.Proxy, prov provider.Provider, hash string, cloudInit []byte) (time.Duration, error) {
	inst, err := prov.Create(ctx, provider.CreateRequest{
		Name:      provider.InstanceName(p.UID),
		Proxy:     p,
		Tags:      provider.Tags(p),
		CloudInit: cloudInit,
		SpecHash:  hash,
	})
	c.metrics.ObserveProviderCall(string(p.Spec.Provider), "create", err)
	if err != nil {
		return c.providerFailure(ctx, p, "create", err)
	}
	p.Status.ProviderID = provider.ProviderID(string(p.Spec.Provider), inst.ID)
	klog.FromContext(ctx).Info("Created instance", "instance", p.Status.ProviderID)
	if inst.SpecHash != "" && inst.SpecHash != hash {
		// Create returned an instance an earlier request made (its answer
		// was lost) from an older spec: record what it was built from, so
		// that the next pass replaces it.
		klog.FromContext(ctx).Info("Adopted an instance built from an older spec; replacing it", "instance", p.Status.ProviderID)
		hash = inst.SpecHash
	}
	c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonCreated, "Created instance %s", p.Status.ProviderID)
	if err := c.setSpecHash(ctx, p, hash); err != nil {
		return done, err
	}
	return c.applyInstance(ctx, p, instanceRef{providerName: string(p.Spec.Provider), prov: prov, id: inst.ID}, inst)
}

// replaceInstance deletes the instance built from an older spec; once it is
// gone, the next pass creates its successor. Instances never overlap, so a
// replaced proxy never holds two egress IPs.
func (c *Controller) replaceInstance(ctx context.Context, p *crawlv1alpha1.Proxy, ref instanceRef, hash string) (time.Duration, error) {
	id := p.Status.ProviderID
	inst, err := ref.prov.Get(ctx, ref.id)
	c.metrics.ObserveProviderCall(ref.providerName, "get", err)
	if errors.Is(err, provider.ErrNotFound) {
		clearInstance(p)
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProvisioning, "creating the replacement instance")
		return requeueNow, c.setSpecHash(ctx, p, hash)
	}
	if err != nil {
		return c.providerFailure(ctx, p, "get", err)
	}
	if err := c.deleteUnlessGoing(ctx, p, ref, inst); err != nil {
		return c.providerFailure(ctx, p, "delete", err)
	}
	clearHealth(p)
	if c.setProvisioned(p, metav1.ConditionFalse, ReasonReplacing, fmt.Sprintf("replacing instance %s: the spec or cloud-init changed", id)) {
		klog.FromContext(ctx).Info("Replacing instance", "instance", id)
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonReplacing, "Replacing instance %s: the spec or cloud-init changed", id)
	}
	return c.deletionPoll, nil
}

// observeInstance polls the current instance and stages what it shows.
func (c *Controller) observeInstance(ctx context.Context, p *crawlv1alpha1.Proxy, ref instanceRef) (time.Duration, error) {
	id := p.Status.ProviderID
	inst, err := ref.prov.Get(ctx, ref.id)
	c.metrics.ObserveProviderCall(ref.providerName, "get", err)
	if errors.Is(err, provider.ErrNotFound) {
		if !conditionReasonIs(p, crawlv1alpha1.ConditionProvisioned, ReasonReplacing) {
			klog.FromContext(ctx).Info("Instance vanished; creating a new one", "instance", id)
			c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonInstanceVanished, "Instance %s vanished; creating a new one", id)
		}
		clearInstance(p)
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProvisioning, fmt.Sprintf("instance %s is gone; creating a new one", id))
		return requeueNow, nil
	}
	if err != nil {
		return c.providerFailure(ctx, p, "get", err)
	}
	return c.applyInstance(ctx, p, ref, inst)
}

// applyInstance stages status for an observed instance and says when to look again.
func (c *Controller) applyInstance(ctx context.Context, p *crawlv1alpha1.Proxy, ref instanceRef, inst provider.Instance) (time.Duration, error) {
	id := p.Status.ProviderID
	switch inst.State {
	case provider.StateRunning:
		p.Status.IP, p.Status.Port = inst.IP, inst.Port
		p.Status.ExitRanges = nonEmpty(inst.ExitRanges)
		msg := fmt.Sprintf("instance %s is running at %s", id, proxyaccess.Address(inst.IP, inst.Port))
		if inst.Interruption != "" {
			if err := c.drainInterrupted(ctx, p, inst.Interruption); err != nil {
				return done, err
			}
			msg += fmt.Sprintf("; %s: draining, no new leases", inst.Interruption)
		} else if err := c.undrainReplaced(ctx, p); err != nil {
			return done, err
		}
		c.setProvisioned(p, metav1.ConditionTrue, ReasonCreated, msg)
		c.applyHealth(ctx, p)
		if inst.Interruptible {
			return min(c.driftPoll, InterruptiblePoll), nil
		}
		return c.driftPoll, nil
	case provider.StateStopped:
		// Instances are cattle: a stopped one is deleted and created anew.
		if err := c.deleteUnlessGoing(ctx, p, ref, inst); err != nil {
			return c.providerFailure(ctx, p, "delete", err)
		}
		clearHealth(p)
		if c.setProvisioned(p, metav1.ConditionFalse, ReasonReplacing, fmt.Sprintf("instance %s stopped (%s); replacing it", id, inst.Message)) {
			klog.FromContext(ctx).Info("Instance stopped; replacing it", "instance", id, "detail", inst.Message)
			c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonInstanceStopped, "Instance %s stopped (%s); replacing it", id, inst.Message)
		}
		return c.deletionPoll, nil
	default:
		msg := fmt.Sprintf("instance %s is starting", id)
		if inst.Message != "" {
			msg += ": " + inst.Message
		}
		c.setProvisioned(p, metav1.ConditionFalse, ReasonProvisioning, msg)
		return c.provisioningPoll, nil
	}
}

// drainInterrupted marks a Proxy whose instance has an interruption notice
// as draining, as a pool marks a member it replaces: the lease API grants
// no new lease on it while its live leases renew, and a pool makes a new
// member in its place and deletes this one once drained. The instance is
// not deleted here: it serves until the provider takes it.
func (c *Controller) drainInterrupted(ctx context.Context, p *crawlv1alpha1.Proxy, notice string) error {
	if _, ok := p.Annotations[crawlv1alpha1.DrainingAnnotation]; ok {
		return nil
	}
	klog.FromContext(ctx).Info("Instance interrupted; draining the Proxy", "instance", p.Status.ProviderID, "notice", notice)
	c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonInterrupted, "Instance %s: %s; no new leases on it until it is replaced", p.Status.ProviderID, notice)
	return c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.DrainingAnnotation] = c.clock.Now().UTC().Format(time.RFC3339)
		p.Annotations[crawlv1alpha1.DrainReasonAnnotation] = ReasonInterrupted
	})
}

// undrainReplaced lifts the drain of an interruption from a standalone
// Proxy whose instance runs without a notice: the interrupted one was
// replaced. A pool member stays draining: its pool deletes it.
func (c *Controller) undrainReplaced(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	if p.Annotations[crawlv1alpha1.DrainReasonAnnotation] != ReasonInterrupted || isPoolMember(p) {
		return nil
	}
	klog.FromContext(ctx).Info("The interrupted instance was replaced; leasing the Proxy again", "instance", p.Status.ProviderID)
	return c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
		delete(p.Annotations, crawlv1alpha1.DrainingAnnotation)
		delete(p.Annotations, crawlv1alpha1.DrainReasonAnnotation)
	})
}

// deleteUnlessGoing asks the provider to delete inst unless it is already
// stopped on our request, so polls don't pile up delete calls.
func (c *Controller) deleteUnlessGoing(ctx context.Context, p *crawlv1alpha1.Proxy, ref instanceRef, inst provider.Instance) error {
	if inst.State == provider.StateStopped && deleteSucceeded(p) {
		return nil
	}
	return c.deleteInstance(ctx, ref)
}

// deleteSucceeded reports whether a Delete of ours succeeded for the
// current instance: Replacing and Deleting are set only after one did.
func deleteSucceeded(p *crawlv1alpha1.Proxy) bool {
	return conditionReasonIs(p, crawlv1alpha1.ConditionProvisioned, ReasonReplacing) ||
		conditionReasonIs(p, crawlv1alpha1.ConditionProvisioned, ReasonDeleting)
}

func (c *Controller) deleteInstance(ctx context.Context, ref instanceRef) error {
	err := ref.prov.Delete(ctx, ref.id)
	c.metrics.ObserveProviderCall(ref.providerName, "delete", err)
	return err
}

// providerFailure turns a provider error into status and a retry by its class.
func (c *Controller) providerFailure(ctx context.Context, p *crawlv1alpha1.Proxy, op string, err error) (time.Duration, error) {
	switch provider.Class(err) {
	case provider.ErrQuotaExceeded:
		if c.setProvisioned(p, metav1.ConditionFalse, ReasonQuotaExceeded, fmt.Sprintf("%s: %v", op, err)) {
			klog.FromContext(ctx).Info("Provider quota exceeded; retrying on a fixed schedule", "op", op, "err", err, "retry", c.quotaRetry)
			c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonQuotaExceeded, "Provider %s %s: %v (retrying every %s)", p.Spec.Provider, op, err, c.quotaRetry)
		}
		return c.quotaRetry, nil
	case provider.ErrPermanent:
		if c.setProvisioned(p, metav1.ConditionFalse, ReasonPermanentError, fmt.Sprintf("%s: %v", op, err)) {
			klog.FromContext(ctx).Info("Permanent provider error; waiting for a spec change", "op", op, "err", err)
			c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonPermanentError, "Provider %s %s: %v (nothing more happens until the spec changes)", p.Spec.Provider, op, err)
		}
		return done, nil
	default:
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonProviderError, "Provider %s %s: %v (retrying)", p.Spec.Provider, op, err)
		return done, fmt.Errorf("provider %s %s: %w", p.Spec.Provider, op, err)
	}
}

// permanentlyFailed is the latch: a permanent error at this generation stops
// all provider calls until the spec (and so the generation) changes.
func permanentlyFailed(p *crawlv1alpha1.Proxy) bool {
	cond := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	return cond != nil && cond.Reason == ReasonPermanentError && cond.ObservedGeneration == p.Generation
}

// resolveCloudInit returns the cloud-init content (nil without cloudInit).
// Errors name the Secret and key, never the content.
func (c *Controller) resolveCloudInit(p *crawlv1alpha1.Proxy) ([]byte, error) {
	ci := p.Spec.CloudInit
	switch {
	case ci == nil:
		return nil, nil
	case ci.Inline != nil:
		return []byte(*ci.Inline), nil
	case ci.SecretRef == nil:
		return nil, errors.New("spec.cloudInit has neither inline nor secretRef")
	}
	key := ci.SecretRef.Key
	if key == "" {
		key = "user-data"
	}
	secret, err := c.secrets.Secrets(p.Namespace).Get(ci.SecretRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("cloud-init Secret %q not found", ci.SecretRef.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading cloud-init Secret %q: %w", ci.SecretRef.Name, err)
	}
	data, ok := secret.Data[key]
	if !ok {
		return nil, fmt.Errorf("cloud-init Secret %q has no key %q", ci.SecretRef.Name, key)
	}
	return data, nil
}

// credentialsDigest is a digest of the username, password and lease keys
// of p's credentials Secret (spec.auth's, or the generated one; "" for
// none): the instance is configured with them, so a rotation must replace
// it. Only the digest enters the spec hash; a Secret without lease keys
// digests as before they existed, so an upgrade replaces no instance.
func (c *Controller) credentialsDigest(p *crawlv1alpha1.Proxy) (string, error) {
	if !c.providers.ConfiguresCredentials(p) {
		// Checked by a service the operator does not run: a new password
		// is used from the next probe and lease on.
		return "", nil
	}
	creds, err := proxyaccess.ReadProxyCredentials(p, c.secrets.Secrets(p.Namespace).Get)
	if creds == nil || err != nil {
		return "", err
	}
	sum := sha256.New()
	sum.Write([]byte(creds.Username))
	sum.Write([]byte{0})
	sum.Write([]byte(creds.Password))
	if creds.LeaseKeys != "" {
		sum.Write([]byte{0})
		sum.Write([]byte(creds.LeaseKeys))
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

func (c *Controller) setSpecHash(ctx context.Context, p *crawlv1alpha1.Proxy, hash string) error {
	return c.updateMetadata(ctx, p, func(p *crawlv1alpha1.Proxy) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.SpecHashAnnotation] = hash
	})
}

// updateMetadata applies change to p's metadata and writes it with Update;
// p keeps its staged status and takes the new resourceVersion, so the status
// write at the end of the sync does not conflict with our own update.
func (c *Controller) updateMetadata(ctx context.Context, p *crawlv1alpha1.Proxy, change func(*crawlv1alpha1.Proxy)) error {
	change(p)
	updated, err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Update(ctx, p, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("updating metadata: %w", err)
	}
	c.remember(updated)
	p.ObjectMeta = updated.ObjectMeta
	return nil
}

func hasFinalizer(p *crawlv1alpha1.Proxy) bool {
	for _, f := range p.Finalizers {
		if f == crawlv1alpha1.Finalizer {
			return true
		}
	}
	return false
}
