// Package pool reconciles ProxyPools: it keeps spec.replicas member Proxies
// made from the pool's template, and decides when a member is replaced
// (template or Secret change, maxAge, unhealthy too long) and how fast (one
// budget of maxSurge and maxUnavailable), draining a member's leases before
// deleting it. The decisions are the pure Decide (plan.go); the I/O around
// it is the loop (controller.go: informers, a queue of pool keys, event
// handlers), the sync (sync.go), the member writes and their events
// (members.go) and the one status write (status.go).
//
// It does not make instances (the Proxy controller does, for each member),
// probe, or lease: the lease store is told through the draining annotation,
// and asked through LeaseCounter.
package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
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

// StoreLeases counts a lease store's live leases per Proxy (store.LeasesByProxy).
type StoreLeases struct{ Store store.Lister }

// LeasesByProxy is LeaseCounter's.
func (l StoreLeases) LeasesByProxy(namespace string) (map[string]int, error) {
	return store.LeasesByProxy(l.Store, namespace)
}

// Metrics receives the pool measurements; see pkg/metrics.
type Metrics interface {
	SetPoolReplicas(namespace, pool string, byState map[string]int)
	ForgetPool(namespace, pool string)
	ObservePoolRemoval(namespace, pool, reason string)
	// SetPoolCost: perThousandOK < 0 before the first ok outcome.
	SetPoolCost(namespace, pool, currency string, cost, perThousandOK float64)
}

type noMetrics struct{}

func (noMetrics) SetPoolReplicas(string, string, map[string]int)       {}
func (noMetrics) ForgetPool(string, string)                            {}
func (noMetrics) ObservePoolRemoval(string, string, string)            {}
func (noMetrics) SetPoolCost(string, string, string, float64, float64) {}

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
	// Outcomes are the lease store's counts per pool, for status.usage;
	// nil: usage is not reported.
	Outcomes OutcomeCounter
	// UsagePoll overrides UsagePoll.
	UsagePoll time.Duration
	// Providers are the enabled providers, asked for the age at which their
	// instances must be replaced (provider.Recycler); nil: none sets one.
	Providers provider.Set
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
	// pendingInstances: the same, for a pool's shared instances.
	pendingInstances *expectations
	recycle          recycleState
	usage            usageState
	// rerolls are the recent duplicate exit IP re-rolls (duplicates.go).
	rerolls rerollState
	// Autoscaling (autoscale_sync.go).
	demand      DemandSource
	demandPoll  time.Duration
	autoscalers autoscaler
	providers   provider.Set
}

// secretIndex indexes pools by the "namespace/name" of the Secrets their
// template references.
const secretIndex = "secret"

// NewController registers the handlers. It starts nothing. It reads better
// whole: each informer's handlers and the index they need sit together,
// in the order a pool's events arrive.
func NewController(cfg Config) (*Controller, error) {
	c := &Controller{
		crawl:            cfg.CrawlClient,
		kube:             cfg.KubeClient,
		pools:            cfg.PoolInformer.Lister(),
		proxies:          cfg.ProxyInformer.Lister(),
		secrets:          cfg.SecretInformer.Lister(),
		poolIndex:        cfg.PoolInformer.Informer().GetIndexer(),
		leases:           cfg.Leases,
		recorder:         cfg.Recorder,
		clock:            cfg.Clock,
		metrics:          cfg.Metrics,
		drainPoll:        cfg.DrainPoll,
		pending:          newExpectations(),
		pendingInstances: newExpectations(),
		demand:           cfg.Demand,
		demandPoll:       cfg.DemandPoll,
		providers:        cfg.Providers,
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
	c.usage = newUsageState(cfg.Outcomes, cfg.UsagePoll)
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
					c.pendingInstances.observeGone(cache.NewObjectName(p.Namespace, owner), p.Name)
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
	c.pendingInstances.observe(key, p)
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
