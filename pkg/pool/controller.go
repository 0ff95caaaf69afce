// Package pool reconciles ProxyPools: it keeps spec.replicas member Proxies
// made from the pool's template, and decides when a member is replaced
// (template or Secret change, maxAge, unhealthy too long) and how fast (one
// budget of maxSurge and maxUnavailable), draining a member's leases before
// deleting it. The decisions are the pure Decide (plan.go); this file is the
// I/O around it: informers, a queue of pool keys, writes and events.
//
// It does not make instances (the Proxy controller does, for each member),
// probe, or lease: the lease store is told through the draining annotation,
// and asked through LeaseCounter.
package pool

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlscheme "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/scheme"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/queueworker"
)

// FieldManager names the pool controller in managedFields.
const FieldManager = "proxy-operator-pool"

// DrainPoll is how often a pool with leased draining members looks again:
// a lease ending is no Kubernetes event.
const DrainPoll = 2 * time.Second

// Event reasons (and Progressing condition reasons).
const (
	EventMemberCreated     = "MemberCreated"
	EventDraining          = "Draining"
	EventMemberDeleted     = "MemberDeleted"
	EventScaled            = "Scaled"
	EventRemediationPaused = "RemediationPaused"
	EventRolloutComplete   = "RolloutComplete"
	EventRevisionChanged   = "RevisionChanged"
	EventTemplateError     = "TemplateError"
)

// LeaseCounter tells how many live leases hold each Proxy of a namespace.
// An error (the store is not leading yet) makes every count unknown.
type LeaseCounter interface {
	LeasesByProxy(namespace string) (map[string]int, error)
}

// Metrics receives the pool measurements; see pkg/metrics.
type Metrics interface {
	SetPoolReplicas(namespace, pool string, byState map[string]int)
	ForgetPool(namespace, pool string)
	ObservePoolRemoval(namespace, pool, reason string)
}

type noMetrics struct{}

func (noMetrics) SetPoolReplicas(string, string, map[string]int) {}
func (noMetrics) ForgetPool(string, string)                      {}
func (noMetrics) ObservePoolRemoval(string, string, string)      {}

// Config is what a Controller needs.
type Config struct {
	CrawlClient versioned.Interface
	// KubeClient records events when Recorder is nil.
	KubeClient     kubernetes.Interface
	PoolInformer   crawlinformers.ProxyPoolInformer
	ProxyInformer  crawlinformers.ProxyInformer
	SecretInformer coreinformers.SecretInformer
	// Leases counts leases per member; nil: unknown (drains wait for drainTimeout).
	Leases   LeaseCounter
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	Metrics  Metrics
	// DrainPoll overrides DrainPoll.
	DrainPoll        time.Duration
	WorkqueueMetrics workqueue.MetricsProvider

	// Burn is the lease store's record of each member's instance, for
	// spec.recycle; nil: nothing is recycled on evidence.
	Burn BurnCounter
	// RecyclePoll overrides RecyclePoll.
	RecyclePoll time.Duration
	// Demand tells waiting and refused acquires (spec.autoscaling); nil:
	// demand is unknown and autoscaled pools keep their size.
	Demand DemandSource
	// DemandPoll overrides DemandPoll.
	DemandPoll time.Duration
}

// Controller reconciles ProxyPools.
type Controller struct {
	crawl     versioned.Interface
	kube      kubernetes.Interface
	pools     crawllisters.ProxyPoolLister
	proxies   crawllisters.ProxyLister
	secrets   corelisters.SecretLister
	poolIndex cache.Indexer
	synced    []cache.InformerSynced
	leases    LeaseCounter
	recorder  record.EventRecorder
	clock     clock.PassiveClock
	metrics   Metrics
	drainPoll time.Duration
	queue     workqueue.TypedRateLimitingInterface[cache.ObjectName]
	pending   *expectations
	recycle   recycleState
	// Autoscaling (autoscale_sync.go).
	demand      DemandSource
	demandPoll  time.Duration
	autoscalers autoscaler
}

// secretIndex indexes pools by the "namespace/name" of the Secrets their
// template references.
const secretIndex = "secret"

// NewController registers the handlers. It starts nothing.
func NewController(cfg Config) (*Controller, error) {
	c := &Controller{
		crawl:      cfg.CrawlClient,
		kube:       cfg.KubeClient,
		pools:      cfg.PoolInformer.Lister(),
		proxies:    cfg.ProxyInformer.Lister(),
		secrets:    cfg.SecretInformer.Lister(),
		poolIndex:  cfg.PoolInformer.Informer().GetIndexer(),
		leases:     cfg.Leases,
		recorder:   cfg.Recorder,
		clock:      cfg.Clock,
		metrics:    cfg.Metrics,
		drainPoll:  cfg.DrainPoll,
		pending:    newExpectations(),
		demand:     cfg.Demand,
		demandPoll: cfg.DemandPoll,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, time.Minute),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(20), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "proxypools", MetricsProvider: cfg.WorkqueueMetrics},
		),
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	if c.drainPoll <= 0 {
		c.drainPoll = DrainPoll
	}
	c.recycle = newRecycleState(cfg.Burn, cfg.RecyclePoll)
	if c.demandPoll <= 0 {
		c.demandPoll = DemandPoll
	}
	if c.demand != nil {
		c.demand.NotifyDemand(c.onDemand)
	}
	if err := cfg.PoolInformer.Informer().AddIndexers(cache.Indexers{secretIndex: poolSecrets}); err != nil {
		return nil, fmt.Errorf("adding the pool Secret index: %w", err)
	}
	poolReg, err := cfg.PoolInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			if !sameResourceVersion(oldObj, newObj) {
				c.enqueue(newObj)
			}
		},
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the ProxyPool event handler: %w", err)
	}
	proxyReg, err := cfg.ProxyInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.observeMember,
		UpdateFunc: func(oldObj, newObj any) {
			if !sameResourceVersion(oldObj, newObj) {
				c.observeMember(newObj)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				if owner := poolOf(p); owner != "" {
					c.pending.observeGone(cache.NewObjectName(p.Namespace, owner), p.Name)
					c.queue.Add(cache.NewObjectName(p.Namespace, owner))
				}
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the Proxy event handler: %w", err)
	}
	secretReg, err := cfg.SecretInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueuePoolsOfSecret,
		UpdateFunc: func(oldObj, newObj any) {
			if !sameResourceVersion(oldObj, newObj) {
				c.enqueuePoolsOfSecret(newObj)
			}
		},
		DeleteFunc: c.enqueuePoolsOfSecret,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the Secret event handler: %w", err)
	}
	c.synced = []cache.InformerSynced{poolReg.HasSynced, proxyReg.HasSynced, secretReg.HasSynced}
	return c, nil
}

// Run waits for the caches, runs workers until ctx ends, and returns once
// every worker has finished its item.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	if c.recorder == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartStructuredLogging(4)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		// A private scheme: events need our kinds, and scheme.Scheme is shared.
		eventScheme := runtime.NewScheme()
		if err := crawlscheme.AddToScheme(eventScheme); err != nil {
			return fmt.Errorf("building the event scheme: %w", err)
		}
		c.recorder = broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: "proxy-operator-pool"})
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		c.queue.ShutDown()
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("pool controller: informer caches did not sync")
	}
	logger.Info("Starting pool workers", "count", workers)
	queueworker.Run(ctx, c.queue, workers, c.loggedSync)
	return nil
}

// loggedSync is the workers' sync: c.sync with its log line on a failure.
// A pool's requeue is a positive duration or none, so a negative one is
// none here too (for queueworker it would mean at once).
func (c *Controller) loggedSync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	requeue, err := c.sync(ctx, key)
	if err != nil {
		queueworker.LogSyncFailure(klog.FromContext(ctx), "pool", key, err)
	}
	return max(requeue, 0), err
}

// sync reconciles one pool: it reads the members, asks Decide, acts on the
// plan and writes status at most once.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pool", key)
	ctx = klog.NewContext(ctx, logger)

	cached, err := c.pools.ProxyPools(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.metrics.ForgetPool(key.Namespace, key.Name)
		c.recycle.forget(key)
		c.autoscalers.forget(key)
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
	pol, err := policyOf(pool, revision)
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
	if pol, err = policyOf(pool, revision); err != nil {
		return 0, err
	}
	c.recycle.addBurn(pool.Namespace, pol.Recycle, members)
	plan := Decide(pol, members, now)
	logger.V(4).Info("Plan", "create", plan.Create, "drain", len(plan.Drain), "delete", len(plan.Delete), "counts", plan.Counts)

	errs := []error{scaleErr}
	for _, d := range plan.Delete {
		errs = append(errs, c.deleteMember(ctx, pool, byName[d.Name], d))
	}
	for _, d := range plan.Drain {
		errs = append(errs, c.drainMember(ctx, pool, byName[d.Name], d, now))
	}
	for range plan.Create {
		errs = append(errs, c.createMember(ctx, pool, revision))
	}
	if cached.Status.ObservedGeneration != pool.Generation && plan.Counts.OutOfDate == 0 && (plan.Create > 0 || hasScaleDown(plan)) {
		c.recorder.Eventf(pool, corev1.EventTypeNormal, EventScaled, "Scaling to %d members (%d exist)", pol.Replicas, plan.Counts.Total-plan.Counts.Deleting)
	}

	c.stageStatus(pool, pol, plan, revision)
	c.recycle.stageStatus(pool, cached, pol.Recycle, plan, byName)
	c.metrics.SetPoolReplicas(pool.Namespace, pool.Name, map[string]int{
		"desired": pol.Replicas, "current": plan.Counts.Total, "ready": plan.Counts.Ready, "available": plan.Counts.Available,
		"updated": plan.Counts.Updated, "draining": plan.Counts.Draining, "unhealthy": plan.Counts.Unhealthy,
	})
	errs = append(errs, c.writeStatus(ctx, cached, pool))
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	requeue := plan.RequeueAfter
	if plan.Counts.Draining > 0 && (requeue == 0 || requeue > c.drainPoll) {
		requeue = c.drainPoll
	}
	if c.pending.any(key) && (requeue == 0 || requeue > c.drainPoll) {
		requeue = c.drainPoll // an expectation may expire without an event
	}
	if pol.Recycle.Enabled() && (requeue == 0 || requeue > c.recycle.poll) {
		requeue = c.recycle.poll
	}
	for _, d := range []time.Duration{scaleRequeue, c.demandPollFor(pool)} {
		if d > 0 && (requeue == 0 || requeue > d) {
			requeue = d
		}
	}
	return requeue, nil
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
		m := memberOf(p)
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
func memberOf(p *crawlv1alpha1.Proxy) Member {
	m := Member{
		Name:     p.Name,
		Revision: p.Labels[crawlv1alpha1.PoolRevisionLabel],
		Created:  p.CreationTimestamp.Time,
		Deleting: p.DeletionTimestamp != nil,
		Ready:    p.Status.Phase == crawlv1alpha1.PhaseReady && p.DeletionTimestamp == nil,
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

func (c *Controller) createMember(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string) error {
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
			Spec: *pool.Spec.Template.Spec.DeepCopy(),
		}
		c.pending.expect(key, name, pendingOp{kind: opCreate, at: c.clock.Now(), revision: revision})
		_, err := c.crawl.CrawlV1alpha1().Proxies(pool.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			c.pending.forget(key, name)
			continue
		}
		if err != nil {
			c.pending.forget(key, name)
			return fmt.Errorf("creating member: %w", err)
		}
		klog.FromContext(ctx).Info("Created member", "member", name, "revision", revision)
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
	leases := "an unknown number of leases (the lease API is not leading)"
	if r.Leases >= 0 {
		leases = fmt.Sprintf("%d lease(s)", r.Leases)
	}
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventDraining, "Draining member %s: %s; it takes no new lease, keeps %s, and goes when they end or drainTimeout passes",
		p.Name, describeReason(r.Reason, p, pool), leases)
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
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventMemberDeleted, "Deleted member %s (%s): %s", p.Name, d.Why, describeReason(reason, p, pool))
	return nil
}

func describeReason(r Reason, p *crawlv1alpha1.Proxy, pool *crawlv1alpha1.ProxyPool) string {
	switch r {
	case ReasonOutOfDate:
		return fmt.Sprintf("replaced because out of date (revision %s, current %s)", p.Labels[crawlv1alpha1.PoolRevisionLabel], pool.Status.Revision)
	case ReasonTooOld:
		return fmt.Sprintf("replaced because too old (created %s, maxAge %s)", p.CreationTimestamp.UTC().Format(time.RFC3339), pool.Spec.MaxAge.Duration)
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

// deleteOrphans deletes the members of a pool that is gone. A real
// cluster's garbage collector does the same through the ownerReferences;
// the operator does not wait for one (and test clusters have none).
func (c *Controller) deleteOrphans(ctx context.Context, key cache.ObjectName) error {
	sel := labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolLabel: key.Name})
	proxies, err := c.proxies.Proxies(key.Namespace).List(sel)
	if err != nil {
		return err
	}
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

func policyOf(pool *crawlv1alpha1.ProxyPool, revision string) (Policy, error) {
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
	if d := pool.Spec.MaxAge; d != nil {
		pol.MaxAge = d.Duration
	}
	if pol.Recycle, err = recyclePolicyOf(pool.Spec.Recycle); err != nil {
		return Policy{}, err
	}
	return pol, nil
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

// poolOf is the name of the ProxyPool that controls p, "" if none.
func poolOf(p *crawlv1alpha1.Proxy) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "ProxyPool" {
		return ""
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != crawlv1alpha1.SchemeGroupVersion.Group {
		return ""
	}
	return ref.Name
}

func (c *Controller) observeMember(obj any) {
	p, ok := obj.(*crawlv1alpha1.Proxy)
	if !ok {
		return
	}
	owner := poolOf(p)
	if owner == "" {
		return
	}
	key := cache.NewObjectName(p.Namespace, owner)
	c.pending.observe(key, p)
	c.queue.Add(key)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueuePoolsOfSecret(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	pools, err := c.poolIndex.ByIndex(secretIndex, cache.MetaObjectToName(secret).String())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, p := range pools {
		c.enqueue(p)
	}
}

func poolSecrets(obj any) ([]string, error) {
	pool, ok := obj.(*crawlv1alpha1.ProxyPool)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, name := range referencedSecrets(&pool.Spec.Template.Spec) {
		keys = append(keys, cache.NewObjectName(pool.Namespace, name).String())
	}
	return keys, nil
}

func sameResourceVersion(oldObj, newObj any) bool {
	o, okOld := oldObj.(metav1.Object)
	n, okNew := newObj.(metav1.Object)
	return okOld && okNew && o.GetResourceVersion() == n.GetResourceVersion()
}
