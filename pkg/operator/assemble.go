package operator

import (
	"context"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/crawlpolicy"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlscheme "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/scheme"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	crawlinformersv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/kubeconfig"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// clients are the process's API clients on one REST config.
type clients struct {
	cfg   *rest.Config
	kube  kubernetes.Interface
	crawl versioned.Interface
}

func newClients(o Options) (clients, error) {
	cfg, err := kubeconfig.Load(o.Kubeconfig)
	if err != nil {
		return clients{}, err
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.UserAgent = "proxy-operator/" + Version()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	crawl, err := versioned.NewForConfig(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("crawl.proxyfleet.io client: %w", err)
	}
	return clients{cfg: cfg, kube: kube, crawl: crawl}, nil
}

// newOperator builds every part of the process, none of it running yet.
func newOperator(ctx context.Context, o Options, c clients, enabled map[crawlv1alpha1.ProviderName]provider.Provider, geo health.CountryLookup, m *metrics.Metrics) (*operator, error) {
	// No periodic resync: the controller polls instances on its own
	// schedule, and its handlers drop resyncs anyway. trimForCache keeps the
	// caches to what the operator reads (docs/decisions/0120-informers-cache-proxies-secrets-without-managedfields.md).
	kubeInformers := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(o.Namespace), informers.WithTransform(trimForCache))
	crawlInformers := crawlinformers.NewSharedInformerFactoryWithOptions(c.crawl, 0, crawlinformers.WithNamespace(o.Namespace), crawlinformers.WithTransform(trimForCache))
	proxyInformer := crawlInformers.Crawl().V1alpha1().Proxies()
	secretInformer := kubeInformers.Core().V1().Secrets()

	// One broadcaster for the process. It outlives ctx so that events of
	// the drain still go out; run shuts it down last.
	events := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	events.StartStructuredLogging(4)
	engine, ctrl, err := newControllerAndEngine(o, c, proxyInformer, secretInformer, enabled, geo, events, m)
	if err != nil {
		return nil, err
	}
	m.WatchProxies(proxyInformer.Lister(), o.Namespace)

	op := &operator{
		opts:           o,
		metrics:        m,
		controller:     ctrl,
		kubeInformers:  kubeInformers,
		crawlInformers: crawlInformers,
		synced:         []cache.InformerSynced{proxyInformer.Informer().HasSynced, secretInformer.Informer().HasSynced},
		labeler:        podLabeler{client: c.kube, namespace: o.PodNamespace, name: o.PodName},
		kube:           c.kube,
		health:         engine,
		events:         events,
	}
	op.collector, err = gc.New(gc.Config{
		Providers:     enabled,
		Proxies:       proxyInformer.Lister(),
		ProxiesSynced: proxyInformer.Informer().HasSynced,
		Live:          c.crawl,
		Interval:      o.GCInterval,
		Metrics:       m,
		Recorder:      events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "proxy-operator-gc"}),
	})
	if err != nil {
		return nil, fmt.Errorf("garbage collection: %w", err)
	}
	if err := op.addLeaderElection(o, c.cfg); err != nil {
		return nil, err
	}
	if err := op.addLeaseServer(ctx, o, c, proxyInformer, secretInformer); err != nil {
		return nil, err
	}
	// ProxyPools (pkg/pool), on the leader beside the Proxy controller.
	if op.pools, err = newPoolController(c.crawl, c.kube, crawlInformers, proxyInformer, secretInformer, op.leases, enabled, m); err != nil {
		return nil, fmt.Errorf("pool controller: %w", err)
	}
	op.synced = append(op.synced, crawlInformers.Crawl().V1alpha1().ProxyPools().Informer().HasSynced)
	if op.inspectionCA, err = newInspectionCA(o, c.kube, events); err != nil {
		return nil, err
	}
	return op, nil
}

// newControllerAndEngine builds the Proxy controller and the health engine.
// The engine reports verdicts into the controller's queue and the
// controller reads them back through Verdict, so each needs the other: the
// engine is built first, reporting to verdicts, which is connected to the
// controller as soon as it exists, before anything runs.
func newControllerAndEngine(o Options, c clients, proxyInformer crawlinformersv1alpha1.ProxyInformer, secretInformer coreinformers.SecretInformer,
	enabled map[crawlv1alpha1.ProviderName]provider.Provider, geo health.CountryLookup, events record.EventBroadcaster, m *metrics.Metrics) (*health.Engine, *controller.Controller, error) {
	secrets := secretInformer.Lister()
	verdicts := &controllerQueue{}
	engine, err := health.New(health.Config{
		Proxies: proxyInformer.Informer().GetIndexer(),
		Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
			return secrets.Secrets(namespace).Get(name)
		},
		Enqueue:                 verdicts.Enqueue,
		Workers:                 o.HealthWorkers,
		MaxProbesPerEndpoint:    o.HealthMaxProbesPerEndpoint,
		LatencyReportsPerSecond: o.latencyUpdatesPerSecond(),
		Metrics:                 m,
		Providers:               enabled,
		GeoIP:                   geo,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("health engine: %w", err)
	}
	// A private scheme: events need our kinds, and the global scheme.Scheme
	// is shared by everything in the process.
	eventScheme := runtime.NewScheme()
	if err := crawlscheme.AddToScheme(eventScheme); err != nil {
		return nil, nil, fmt.Errorf("building the event scheme: %w", err)
	}
	ctrl, err := controller.NewController(controller.Config{
		CrawlClient:      c.crawl,
		KubeClient:       c.kube,
		ProxyInformer:    proxyInformer,
		SecretInformer:   secretInformer,
		Providers:        enabled,
		Registry:         o.Registry(),
		Health:           engine,
		Metrics:          m,
		WorkqueueMetrics: m.WorkqueueProvider(),
		Recorder:         events.NewRecorder(eventScheme, corev1.EventSource{Component: controller.FieldManager}),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("controller: %w", err)
	}
	verdicts.connect(ctrl)
	return engine, ctrl, nil
}

// addLeaderElection gives leader election a client of its own, with its
// own rate limit, so that a controller burst (a thousand status writes
// after a failover) cannot delay renewals past the renew deadline. Its
// timeout leaves room for a second attempt within the deadline.
func (op *operator) addLeaderElection(o Options, cfg *rest.Config) error {
	if !o.LeaderElect {
		return nil
	}
	leCfg := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	leCfg.Timeout = o.LeaderElectRenewDeadline / 2
	var err error
	if op.electionClient, err = kubernetes.NewForConfig(leCfg); err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	op.electionWatchdog = leaderelection.NewLeaderHealthzAdaptor(leaderHealthzTolerance)
	op.fence = newLeadershipFence(clock.RealClock{}, o.LeaderElectRenewDeadline)
	return nil
}

// addLeaseServer builds the lease API. Its reviews get a client of their
// own, so that a flood of new bearer tokens never spends the controller's
// API budget; the leader path waits for its feed too, since it must know
// every Ready proxy before it grants.
func (op *operator) addLeaseServer(ctx context.Context, o Options, c clients, proxyInformer crawlinformersv1alpha1.ProxyInformer, secretInformer coreinformers.SecretInformer) error {
	authCfg := rest.AddUserAgent(rest.CopyConfig(c.cfg), "lease-auth")
	authCfg.QPS, authCfg.Burst = o.LeaseAuthQPS, o.LeaseAuthBurst
	authKube, err := kubernetes.NewForConfig(authCfg)
	if err != nil {
		return fmt.Errorf("lease API authentication client: %w", err)
	}
	callers := newLeaseCallers(ctx, o, authKube)
	var feedSynced cache.InformerSynced
	// A replica promoted to lead the store's Raft group feeds it what its
	// informers show (the policies' informer exists by then).
	onLead := func(st *store.Store) {
		policies := op.crawlInformers.Crawl().V1alpha1().CrawlPolicies().Lister()
		if err := feed.Resync(st, proxyInformer.Lister(), policies); err != nil {
			klog.FromContext(ctx).Error(err, "Feeding the lease store on taking the lead")
		}
	}
	if op.leases, op.replica, op.leasePush, feedSynced, err = newLeaseServer(ctx, o, c.kube, callers, proxyInformer, secretInformer, op.metrics, op.fence, onLead); err != nil {
		return err
	}
	op.synced = append(op.synced, feedSynced)
	if err := op.addDashboard(o, c.kube, op.crawlInformers, callers); err != nil {
		return err
	}
	return op.addCrawlPolicies(c)
}

// addCrawlPolicies feeds the CrawlPolicies to the lease store (on every
// replica, so that a standby leads with them) and makes the leader's
// status writer.
func (op *operator) addCrawlPolicies(c clients) error {
	policies := op.crawlInformers.Crawl().V1alpha1().CrawlPolicies()
	// A private scheme, as the controller's: events need our kinds.
	eventScheme := runtime.NewScheme()
	if err := crawlscheme.AddToScheme(eventScheme); err != nil {
		return fmt.Errorf("building the event scheme: %w", err)
	}
	op.policyStatus = crawlpolicy.NewStatusWriter(c.crawl, policies.Lister(), op.leases.Store(), 0).
		WithSiteBanEvents(op.leases.Store(), op.events.NewRecorder(eventScheme, corev1.EventSource{Component: controller.FieldManager}))
	synced, err := feed.CrawlPolicies(op.leases.Store(), policies, op.policyStatus.Poke)
	if err != nil {
		return err
	}
	op.synced = append(op.synced, synced)
	return nil
}

// listen opens every listener before anything runs, so that a taken port
// fails start-up at once, and returns the metrics server's.
func (op *operator) listen(ctx context.Context, o Options, m *metrics.Metrics) (net.Listener, error) {
	logger := klog.FromContext(ctx)
	ln, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	logger.Info("Serving metrics and health", "addr", ln.Addr().String())
	op.leaseListener, err = net.Listen("tcp", o.LeaseAddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--lease-addr: %w", err)
	}
	logger.Info("Serving the lease API", "addr", op.leaseListener.Addr().String(), "auth", o.LeaseAuth)
	return ln, nil
}
