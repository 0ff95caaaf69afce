// Package controller reconciles Proxy objects: one rate-limited workqueue of
// Proxy keys, fed by Proxy and Secret informers and by the health engine, and
// a sync that provisions, replaces and deletes instances through providers and
// writes status. It is the only writer of Proxy status.
//
// It does not probe proxies (pkg/health does, and reports through
// HealthSource), hand out leases (pkg/lease), or collect orphans (pkg/gc).
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/queueworker"
)

// FieldManager names the operator in managedFields and audit logs.
const FieldManager = "proxy-operator"

// Durations of the time-based requeues; Config can override them.
const (
	// ProvisioningPoll: how often a provisioning instance is polled.
	ProvisioningPoll = 5 * time.Second
	// DeletionPoll: how often a deleting instance is polled until gone.
	DeletionPoll = 5 * time.Second
	// DriftPoll: how often a running instance is re-checked (stopped, vanished).
	DriftPoll = 2 * time.Minute
	// InterruptiblePoll: how often a running instance that may get an
	// interruption notice is re-checked; EC2 gives two minutes' notice.
	InterruptiblePoll = 30 * time.Second
	// QuotaRetry: the fixed retry of a create refused for quota; backoff
	// would grow past the moment quota frees.
	QuotaRetry = time.Minute
)

// The sync's requeue instructions besides a positive duration, as
// queueworker reads them.
const (
	// done: no time-based requeue; an event brings the key back.
	done = queueworker.NoRequeue
	// requeueNow: process the key again at once (the next pass acts on what
	// this one learned, such as an instance that vanished).
	requeueNow = queueworker.RequeueNow
)

// secretIndex indexes Proxies by the "namespace/name" of the Secrets their
// spec.cloudInit.secretRef names, of their credentials Secret
// (proxyaccess.CredentialsSecret) and of those their provider renders
// credentials from (provider.CredentialsRenderer), so a Secret event finds
// its Proxies without scanning the namespace.
const secretIndex = "secret"

// HealthSource is the health engine as the controller sees it.
type HealthSource interface {
	// Verdict returns the latest verdict the engine reported for the proxy
	// (a first verdict, a flip, or a material latency change: not every
	// probe, so that a steady fleet causes no status writes), and false
	// while it has none.
	Verdict(key cache.ObjectName) (health.Verdict, bool)
}

// Config is what a Controller needs. Zero durations take the defaults above.
type Config struct {
	CrawlClient    versioned.Interface
	KubeClient     kubernetes.Interface
	ProxyInformer  crawlinformers.ProxyInformer
	SecretInformer coreinformers.SecretInformer
	// Providers are the enabled providers by name; a Proxy naming another
	// fails. The controller also asks them what their instances differ in
	// (rendered credentials, whether an instance is configured with them).
	Providers provider.Set
	// Registry is every provider compiled in, with what of its spec block
	// makes an instance: the spec hash encodes those blocks. nil hashes no
	// provider's block, for tests whose Proxies' blocks do not matter.
	Registry provider.Registry
	// Health reports probe verdicts; nil means none yet (no Healthy condition).
	Health HealthSource
	// Recorder records events; nil starts a broadcaster to the API in Run.
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	Metrics  Metrics
	// WorkqueueMetrics receives the queue's depth, latency and retries; nil
	// uses client-go's global provider (none unless one was registered).
	WorkqueueMetrics workqueue.MetricsProvider

	ProvisioningPoll, DeletionPoll, DriftPoll, QuotaRetry time.Duration
}

// Metrics receives the controller's measurements; see pkg/metrics.
type Metrics interface {
	ObserveSync(result string, d time.Duration)
	ObserveProviderCall(providerName, op string, err error)
}

type noMetrics struct{}

func (noMetrics) ObserveSync(string, time.Duration)         {}
func (noMetrics) ObserveProviderCall(string, string, error) {}

// Controller reconciles Proxies.
type Controller struct {
	crawl versioned.Interface
	kube  kubernetes.Interface
	// objects reads Proxies from the informer cache, or from our own last
	// write when the cache has not caught up with it yet.
	objects   cache.MutationCache
	secrets   corelisters.SecretLister
	indexer   cache.Indexer
	synced    []cache.InformerSynced
	providers provider.Set
	registry  provider.Registry
	health    HealthSource
	recorder  record.EventRecorder
	clock     clock.PassiveClock
	metrics   Metrics
	queue     workqueue.TypedRateLimitingInterface[cache.ObjectName]

	provisioningPoll, deletionPoll, driftPoll, quotaRetry time.Duration
}

// NewController wires the informers' handlers and the queue. It starts
// nothing. It reads better whole: each informer's handlers sit beside the
// filter and index they rely on.
func NewController(cfg Config) (*Controller, error) {
	c := &Controller{
		crawl:            cfg.CrawlClient,
		kube:             cfg.KubeClient,
		secrets:          cfg.SecretInformer.Lister(),
		indexer:          cfg.ProxyInformer.Informer().GetIndexer(),
		providers:        cfg.Providers,
		registry:         cfg.Registry,
		health:           cfg.Health,
		recorder:         cfg.Recorder,
		clock:            cfg.Clock,
		metrics:          cfg.Metrics,
		provisioningPoll: orDefault(cfg.ProvisioningPoll, ProvisioningPoll),
		deletionPoll:     orDefault(cfg.DeletionPoll, DeletionPoll),
		driftPoll:        orDefault(cfg.DriftPoll, DriftPoll),
		quotaRetry:       orDefault(cfg.QuotaRetry, QuotaRetry),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(50), 500)},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "proxies", MetricsProvider: cfg.WorkqueueMetrics},
		),
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	if c.providers == nil {
		c.providers = provider.Set{}
	}

	proxyInformer := cfg.ProxyInformer.Informer()
	// Integer resourceVersions hold for every etcd-backed API server; the
	// entries leave the cache as soon as the informer delivers the same or a
	// newer version.
	c.objects = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), proxyInformer.GetStore(),
		cache.MutationCacheOptions{TTL: time.Minute, MaxCacheSize: 20000})
	if err := proxyInformer.AddIndexers(cache.Indexers{secretIndex: indexBySecret(c.providers)}); err != nil {
		return nil, fmt.Errorf("adding the Secret index: %w", err)
	}
	proxyReg, err := proxyInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.observeProxy(obj)
			c.enqueueObject(obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			c.observeProxy(newObj)
			old, okOld := oldObj.(*crawlv1alpha1.Proxy)
			cur, okNew := newObj.(*crawlv1alpha1.Proxy)
			if okOld && okNew && !proxyChanged(old, cur) {
				return
			}
			c.enqueueObject(newObj)
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				c.objects.OnDelete(p)
			}
			c.enqueueObject(obj)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the Proxy event handler: %w", err)
	}
	secretReg, err := cfg.SecretInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueProxiesOfSecret,
		UpdateFunc: func(oldObj, newObj any) {
			if sameResourceVersion(oldObj, newObj) {
				return // a resync, not a change
			}
			c.enqueueProxiesOfSecret(newObj)
		},
		DeleteFunc: c.enqueueProxiesOfSecret,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the Secret event handler: %w", err)
	}
	c.synced = []cache.InformerSynced{proxyReg.HasSynced, secretReg.HasSynced}
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Enqueue puts a Proxy key on the queue; the health engine calls it on a
// verdict the status should show.
func (c *Controller) Enqueue(key cache.ObjectName) { c.queue.Add(key) }

// Run waits for the caches, runs workers until ctx ends, then shuts the queue
// down and returns once every worker has finished its item.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)

	if c.recorder == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartStructuredLogging(4)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		// A private scheme: events need our kinds, and the global
		// scheme.Scheme is shared by everything in the process.
		eventScheme := runtime.NewScheme()
		if err := crawlscheme.AddToScheme(eventScheme); err != nil {
			return fmt.Errorf("building the event scheme: %w", err)
		}
		c.recorder = broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: FieldManager})
	}

	logger.Info("Waiting for informer caches to sync")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		c.queue.ShutDown()
		if ctx.Err() != nil {
			return nil // shut down before the caches synced: not a failure
		}
		return errors.New("informer caches did not sync")
	}

	logger.Info("Starting workers", "count", workers)
	queueworker.Run(ctx, c.queue, workers, c.observedSync)
	return nil
}

// observedSync is the workers' sync: c.sync with its metric and, on a
// failure, its log line; queueworker applies the verdict.
func (c *Controller) observedSync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	start := c.clock.Now()
	requeue, err := c.sync(ctx, key)
	c.metrics.ObserveSync(syncResult(requeue, err), c.clock.Since(start))
	if err != nil {
		queueworker.LogSyncFailure(klog.FromContext(ctx), "proxy", key, err)
	}
	return requeue, err
}

func syncResult(requeue time.Duration, err error) string {
	switch {
	case err != nil:
		return "error"
	case requeue != done:
		return "requeue"
	default:
		return "success"
	}
}

// sync reconciles one Proxy and writes its status at most once. It returns
// when to look again (done, requeueNow or a duration) or an error to retry
// with backoff.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "proxy", key)
	ctx = klog.NewContext(ctx, logger)
	logger.V(4).Info("Syncing")

	obj, exists, err := c.objects.GetByKey(key.String())
	if err != nil {
		return done, err
	}
	cached, ok := obj.(*crawlv1alpha1.Proxy)
	if !exists || !ok {
		logger.V(4).Info("Proxy is gone")
		return done, nil
	}
	p := cached.DeepCopy()

	var requeue time.Duration
	switch {
	case p.DeletionTimestamp != nil:
		requeue, err = c.reconcileDelete(ctx, p)
	case p.Spec.Mode == crawlv1alpha1.ModeExternal:
		requeue, err = c.reconcileExternal(ctx, p)
	default:
		requeue, err = c.reconcileManaged(ctx, p)
	}
	if statusErr := c.updateStatusIfChanged(ctx, cached, p); statusErr != nil {
		return done, errors.Join(err, statusErr)
	}
	return requeue, err
}

// remember keeps updated, the API server's answer to our own write, for
// the syncs that run before the informer delivers it. The informer may
// have delivered it already (its watch event can beat the write's
// response), and that event found no entry to drop: so the mutation
// cache is told again now what the informer holds, or our copy would stay.
// client-go's LRUExpireCache forgets an expired entry only when it is read,
// and a steady proxy's key is not read again: after 10,000 proxies
// converged, thousands of whole Proxies stayed cached (docs/decisions/0168-write-answer-remembered-only-while-informer.md).
// The copy is trimmed as the informers trim theirs (docs/decisions/0120-informers-cache-proxies-secrets-without-managedfields.md).
func (c *Controller) remember(updated *crawlv1alpha1.Proxy) {
	updated.ManagedFields = nil
	c.objects.Mutation(updated)
	if cur, ok, _ := c.indexer.Get(updated); ok {
		c.observeProxy(cur)
	}
}

// observeProxy tells the mutation cache what the informer delivered, so it
// drops our own writes once the informer has caught up with them.
func (c *Controller) observeProxy(obj any) {
	if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
		c.objects.OnAddOrUpdate(p)
	}
}

func (c *Controller) enqueueObject(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueueProxiesOfSecret enqueues every Proxy whose cloud-init or
// credentials name the Secret.
func (c *Controller) enqueueProxiesOfSecret(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	proxies, err := c.indexer.ByIndex(secretIndex, cache.MetaObjectToName(secret).String())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range proxies {
		c.enqueueObject(obj)
	}
}

// indexBySecret is the secretIndex's function: the Secrets a Proxy's sync
// reads, so that a change to one requeues it.
func indexBySecret(providers provider.Set) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		p, ok := obj.(*crawlv1alpha1.Proxy)
		if !ok {
			return nil, nil
		}
		return secretKeys(p, providers), nil
	}
}

func secretKeys(p *crawlv1alpha1.Proxy, providers provider.Set) []string {
	var keys []string
	if ci := p.Spec.CloudInit; ci != nil && ci.SecretRef != nil {
		keys = append(keys, cache.NewObjectName(p.Namespace, ci.SecretRef.Name).String())
	}
	// The credentials Secret by the one rule (spec.auth's, or the generated
	// one), so that a change to a generated Secret requeues its Proxy too.
	if name := proxyaccess.CredentialsSecret(p); name != "" && (len(keys) == 0 || name != p.Spec.CloudInit.SecretRef.Name) {
		keys = append(keys, cache.NewObjectName(p.Namespace, name).String())
	}
	// The Secrets that rendered credentials are read from (an account's
	// password, which the generated Secret copies).
	for _, name := range providers.CredentialsSources(p) {
		keys = append(keys, cache.NewObjectName(p.Namespace, name).String())
	}
	return keys
}

// proxyChanged says whether an update can change what sync does. Status-only
// updates (our own writes) and resyncs are filtered out.
func proxyChanged(old, cur *crawlv1alpha1.Proxy) bool {
	if old.ResourceVersion == cur.ResourceVersion {
		return false
	}
	return old.Generation != cur.Generation ||
		!old.DeletionTimestamp.Equal(cur.DeletionTimestamp) ||
		len(old.Finalizers) != len(cur.Finalizers) ||
		old.Annotations[crawlv1alpha1.SpecHashAnnotation] != cur.Annotations[crawlv1alpha1.SpecHashAnnotation] ||
		old.Status.ProviderID != cur.Status.ProviderID
}

func sameResourceVersion(oldObj, newObj any) bool {
	o, okOld := oldObj.(interface{ GetResourceVersion() string })
	n, okNew := newObj.(interface{ GetResourceVersion() string })
	return okOld && okNew && o.GetResourceVersion() == n.GetResourceVersion()
}
