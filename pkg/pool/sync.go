package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// sync reconciles one pool: it reads the members, asks Decide, acts on the
// plan and writes status at most once.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pool", key)
	ctx = klog.NewContext(ctx, logger)

	cached, err := c.pools.ProxyPools(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.metrics.ForgetPool(key.Namespace, key.Name)
		c.recycle.forget(key)
		c.usage.forget(key)
		c.autoscalers.forget(key)
		c.rerolls.forget(key)
		return 0, c.deleteOrphans(ctx, key)
	}
	if err != nil {
		return 0, err
	}
	if c.cacheBehindScaleWrite(cached) {
		return c.drainPoll, nil // its informer event brings the key back sooner
	}
	pool := cached.DeepCopy()
	now := c.clock.Now()

	revision, err := Revision(pool, c.secrets)
	if err != nil {
		setCondition(pool, crawlv1alpha1.PoolConditionProgressing, metav1.ConditionFalse, EventTemplateError, err.Error())
		c.recorder.Eventf(pool, corev1.EventTypeWarning, EventTemplateError, "%v", err)
		return 0, errors.Join(err, c.writeStatus(ctx, cached, pool))
	}
	pol, err := policyOf(pool, revision, c.providers)
	if err != nil {
		return 0, err
	}
	if pool.Status.Revision != "" && pool.Status.Revision != revision {
		c.recorder.Eventf(pool, corev1.EventTypeNormal, EventRevisionChanged,
			"Template revision %s replaces %s (the template or a Secret it references changed); rolling out with maxSurge %d, maxUnavailable %d",
			revision, pool.Status.Revision, pol.MaxSurge, pol.MaxUnavailable)
	}

	members, byName, err := c.members(pool)
	if err != nil {
		return 0, err
	}
	// spec.autoscaling may write spec.replicas first (autoscale_sync.go); a
	// failed write is in the condition and retried, the sync goes on.
	scaleRequeue, scaleErr := c.autoscale(ctx, pool, revision, members, now)
	if pol, err = policyOf(pool, revision, c.providers); err != nil {
		return 0, err
	}
	c.recycle.addBurn(pool.Namespace, pol.Recycle, members)
	var sh shared
	if pool.Spec.MembersPerInstance != nil {
		if sh, err = c.sharedInstances(pool, byName); err != nil {
			return 0, err
		}
	}
	duplicates := DecideDuplicates(len(duplicateExitIPs(members)), rangeShortages(sh.instances, sh.exitRanges()), c.rerolls.recent(key, now), now)
	pol.KeepDuplicates = !duplicates.Reroll
	plan := Decide(pol, members, now)
	c.rerolls.record(key, plan, now)
	next := wakeup(plan.RequeueAfter)
	next.at(duplicates.RecheckAfter) // a back-off ends, or the window frees a re-roll
	plan.RequeueAfter = time.Duration(next)
	logger.V(4).Info("Plan", "create", plan.Create, "drain", len(plan.Drain), "delete", len(plan.Delete), "counts", plan.Counts, "duplicates", duplicates.Reason)

	errs := []error{scaleErr}
	if per := pool.Spec.MembersPerInstance; per != nil {
		// Members are sessions on shared instances: they are created where
		// the instance plan places them, not from the template.
		iplan := PlanInstances(sh.instances, pol.Replicas, int(*per), plan.Create, revision)
		logger.V(4).Info("Instance plan", "create", iplan.Create, "delete", iplan.Delete, "placed", len(iplan.Place))
		if len(iplan.Place) < plan.Create && (plan.RequeueAfter == 0 || plan.RequeueAfter > c.drainPoll) {
			plan.RequeueAfter = c.drainPoll // members wait for an instance to serve
		}
		removals := plan
		removals.Create = 0
		errs = append(errs, c.act(ctx, pool, revision, removals, byName, now)...)
		errs = append(errs, c.actOnInstances(ctx, pool, revision, iplan, sh)...)
	} else {
		errs = append(errs, c.act(ctx, pool, revision, plan, byName, now)...)
	}
	errs = append(errs, c.syncExitCountryLabels(ctx, pool.Namespace, byName)...)
	if cached.Status.ObservedGeneration != pool.Generation && plan.Counts.OutOfDate == 0 && (plan.Create > 0 || hasScaleDown(plan)) {
		c.recorder.Eventf(pool, corev1.EventTypeNormal, EventScaled, "Scaling to %d members (%d exist)", pol.Replicas, plan.Counts.Total-plan.Counts.Deleting)
	}

	c.stageStatus(pool, pol, plan, revision)
	stageDuplicates(pool, duplicates)
	c.recycle.stageStatus(pool, cached, pol.Recycle, plan, byName)
	c.usage.stageUsage(pool, cached, len(members), now)
	c.reportCost(pool)
	c.metrics.SetPoolReplicas(pool.Namespace, pool.Name, map[string]int{
		"desired": pol.Replicas, "current": plan.Counts.Total, "ready": plan.Counts.Ready, "available": plan.Counts.Available,
		"updated": plan.Counts.Updated, "draining": plan.Counts.Draining, "unhealthy": plan.Counts.Unhealthy,
	})
	errs = append(errs, c.writeStatus(ctx, cached, pool))
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return c.requeueAfter(key, pool, pol, plan, scaleRequeue), nil
}

// act carries the plan out: deletes, drains, then creates, one event each;
// it returns every write's error, nil ones included.
func (c *Controller) act(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string, plan Plan, byName map[string]*crawlv1alpha1.Proxy, now time.Time) []error {
	var errs []error
	for _, d := range plan.Delete {
		errs = append(errs, c.deleteMember(ctx, pool, byName[d.Name], d))
	}
	for _, d := range plan.Drain {
		errs = append(errs, c.drainMember(ctx, pool, byName[d.Name], d, now))
	}
	for range plan.Create {
		errs = append(errs, c.createMember(ctx, pool, revision))
	}
	return errs
}

// requeueAfter is when the pool is looked at again: the soonest of the
// plan's own wake-up and the polls for what changes without an event
// (drains, expectations, burn, autoscaling, demand).
func (c *Controller) requeueAfter(key cache.ObjectName, pool *crawlv1alpha1.ProxyPool, pol Policy, plan Plan, scaleRequeue time.Duration) time.Duration {
	var polls []time.Duration
	if plan.Counts.Draining > 0 {
		polls = append(polls, c.drainPoll)
	}
	if c.pending.any(key) || c.pendingInstances.any(key) {
		polls = append(polls, c.drainPoll) // an expectation may expire without an event
	}
	if pol.Recycle.Enabled() {
		polls = append(polls, c.recycle.poll)
	}
	if c.usage.outcomes != nil {
		polls = append(polls, c.usage.poll)
	}
	requeue := plan.RequeueAfter
	for _, d := range append(polls, scaleRequeue, c.demandPollFor(pool)) {
		if d > 0 && (requeue == 0 || requeue > d) {
			requeue = d
		}
	}
	return requeue
}

func hasScaleDown(p Plan) bool {
	for _, d := range p.Drain {
		if d.Reason == ReasonScaledDown {
			return true
		}
	}
	for _, d := range p.Delete {
		if d.Reason == ReasonScaledDown {
			return true
		}
	}
	return false
}

// members reads the pool's members from the cache, with our own writes
// the cache has not shown yet laid over them, so that a sync never acts
// twice on one decision.
func (c *Controller) members(pool *crawlv1alpha1.ProxyPool) ([]Member, map[string]*crawlv1alpha1.Proxy, error) {
	sel := labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolLabel: pool.Name})
	proxies, err := c.proxies.Proxies(pool.Namespace).List(sel)
	if err != nil {
		return nil, nil, err
	}
	var leases map[string]int
	if c.leases != nil {
		if leases, err = c.leases.LeasesByProxy(pool.Namespace); err != nil {
			leases = nil
		}
	}
	key := cache.MetaObjectToName(pool)
	pend := c.pending.snapshot(key, c.clock.Now())
	byName := map[string]*crawlv1alpha1.Proxy{}
	var members []Member
	for _, p := range proxies {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != pool.UID {
			continue // a Proxy that only borrowed the label is not ours
		}
		byName[p.Name] = p
		m := memberOf(p, c.providers)
		m.Leases = -1
		if leases != nil {
			m.Leases = leases[p.Name]
		}
		if op, ok := pend[p.Name]; ok {
			switch op.kind {
			case opDelete:
				m.Deleting = true
			case opDrain:
				if m.DrainingSince.IsZero() {
					m.DrainingSince = op.at
				}
			}
		}
		members = append(members, m)
	}
	for name, op := range pend {
		if _, seen := byName[name]; !seen && op.kind == opCreate {
			members = append(members, Member{Name: name, Revision: op.revision, Created: op.at})
		}
	}
	return members, byName, nil
}

// memberOf is what Decide needs of a member Proxy.
func memberOf(p *crawlv1alpha1.Proxy, providers provider.Set) Member {
	m := Member{
		Name:     p.Name,
		Revision: p.Labels[crawlv1alpha1.PoolRevisionLabel],
		Created:  p.CreationTimestamp.Time,
		Deleting: p.DeletionTimestamp != nil,
		Ready:    p.Status.Phase == crawlv1alpha1.PhaseReady && p.DeletionTimestamp == nil,
		ExitIP:   p.Status.ExitIP,
		// Both are compared only for a Ready member (Member.countryMismatch).
		ExitCountry:  p.Status.ExitCountry,
		AskedCountry: providers.AskedCountry(p),
	}
	switch p.Status.Phase {
	case crawlv1alpha1.PhaseUnhealthy:
		m.UnhealthySince = p.CreationTimestamp.Time
		if cond := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy); cond != nil && cond.Status == metav1.ConditionFalse {
			m.UnhealthySince = cond.LastTransitionTime.Time
		}
	case crawlv1alpha1.PhaseReady, crawlv1alpha1.PhaseDeleting:
	default: // Pending, Provisioning, Failed: not coming up
		m.Starting = true
		m.UnhealthySince = p.CreationTimestamp.Time
		if cond := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); cond != nil && cond.LastTransitionTime.After(m.UnhealthySince) {
			m.UnhealthySince = cond.LastTransitionTime.Time
		}
	}
	if v, ok := p.Annotations[crawlv1alpha1.DrainingAnnotation]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			m.DrainingSince = t
		} else {
			m.DrainingSince = p.CreationTimestamp.Time // unreadable: drain anyway
		}
	}
	return m
}

// deleteOrphans deletes the members of a pool that is gone. A real
// cluster's garbage collector does the same through the ownerReferences;
// the operator does not wait for one (and test clusters have none).
func (c *Controller) deleteOrphans(ctx context.Context, key cache.ObjectName) error {
	sel := labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolLabel: key.Name})
	proxies, err := c.proxies.Proxies(key.Namespace).List(sel)
	if err != nil {
		return err
	}
	// And its shared instances (spec.membersPerInstance).
	sel = labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolInstanceLabel: key.Name})
	instances, err := c.proxies.Proxies(key.Namespace).List(sel)
	if err != nil {
		return err
	}
	proxies = append(proxies, instances...)
	var errs []error
	for _, p := range proxies {
		if poolOf(p) != key.Name || p.DeletionTimestamp != nil {
			continue
		}
		// The pool may have been recreated under the same name: its UID differs.
		if live, err := c.pools.ProxyPools(key.Namespace).Get(key.Name); err == nil && metav1.GetControllerOf(p).UID == live.UID {
			continue
		}
		uid := p.UID
		err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting member %s of deleted pool: %w", p.Name, err))
			continue
		}
		klog.FromContext(ctx).Info("Deleted member of a deleted pool", "member", p.Name)
	}
	return errors.Join(errs...)
}

func policyOf(pool *crawlv1alpha1.ProxyPool, revision string, providers provider.Set) (Policy, error) {
	replicas := 1
	if pool.Spec.Replicas != nil {
		replicas = int(*pool.Spec.Replicas)
	}
	surge, unavailable, unhealthy, err := ResolvePolicy(replicas, pool.Spec.Strategy.MaxSurge, pool.Spec.Strategy.MaxUnavailable, pool.Spec.Remediation.MaxUnhealthy)
	if err != nil {
		return Policy{}, err
	}
	pol := Policy{Replicas: replicas, MaxSurge: surge, MaxUnavailable: unavailable, MaxUnhealthy: unhealthy, Revision: revision,
		DrainTimeout: 5 * time.Minute, UnhealthyTimeout: 5 * time.Minute}
	if d := pool.Spec.DrainTimeout; d != nil {
		pol.DrainTimeout = d.Duration
	}
	if d := pool.Spec.Remediation.UnhealthyTimeout; d != nil {
		pol.UnhealthyTimeout = d.Duration
	}
	pol.MaxAge, _ = maxAgeOf(pool, providers)
	if pol.Recycle, err = recyclePolicyOf(pool.Spec.Recycle); err != nil {
		return Policy{}, err
	}
	return pol, nil
}

// maxAgeOf is the age at which pool replaces a member, 0 for never:
// spec.maxAge, or the age limit of the template's provider
// (provider.Recycler: a proxy network's session leaves before the network
// moves it to another IP) when that is sooner. byProvider is the provider's
// limit when it is the one that binds.
func maxAgeOf(pool *crawlv1alpha1.ProxyPool, providers provider.Set) (age time.Duration, byProvider *provider.RecycleAge) {
	if d := pool.Spec.MaxAge; d != nil {
		age = d.Duration
	}
	if limit, ok := providers.RecycleAge(&pool.Spec.Template.Spec); ok && (age == 0 || limit.Age < age) {
		return limit.Age, &limit
	}
	return age, nil
}

func memberLabels(pool *crawlv1alpha1.ProxyPool, revision string) map[string]string {
	l := copyMap(pool.Spec.Template.Metadata.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[crawlv1alpha1.PoolLabel] = pool.Name
	l[crawlv1alpha1.PoolRevisionLabel] = revision
	return l
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
