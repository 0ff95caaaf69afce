// Package operator wires the proxy-operator process together: the REST
// config and clientsets, the informers, the controller, the metrics server,
// leader election, and the order in which all of it starts and drains.
//
// It decides no reconcile behaviour (pkg/controller does) and parses no
// command line (cmd/proxy-operator does, through Options.AddFlags).
//
// Every replica runs the informers and the metrics server (/metrics,
// /healthz, /readyz), so a standby has warm caches and is Ready; only the
// leader runs the loops that act on the fleet (runLeader). A replica that
// loses the lease exits with an error so that its Pod restarts clean, rather
// than trying to lead again with state from its first term.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlscheme "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/scheme"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	crawlinformersv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"github.com/proxyfleet/proxy-operator/pkg/pool"
)

// LeaseName names the coordination.k8s.io Lease the replicas elect a leader with.
const LeaseName = "proxy-operator"

// shutdownTimeout bounds the graceful shutdown of an HTTP server; a scrape
// or probe still running after it is cut off.
const shutdownTimeout = 10 * time.Second

// leaderHealthzTolerance is how long past its lease's expiry a leader that
// stopped renewing still passes /healthz (kube-controller-manager's 20s).
const leaderHealthzTolerance = 20 * time.Second

// errLostLease ends the process when another replica took the lease over
// (or it could not be renewed in time).
var errLostLease = errors.New("lost the leader lease; exiting so that the Pod restarts clean")

// Run runs the operator until ctx ends (SIGTERM), then drains: the
// controller's workers finish their item, the leader lease is released, the
// informers stop and the metrics server shuts down. It returns nil after a
// requested shutdown, and an error when start-up fails, a server fails, or
// this replica loses the lease.
//
// providers holds the providers compiled into the binary; --providers picks
// the enabled ones, and naming one that is missing is a start-up error.
func Run(ctx context.Context, o Options, providers ProviderRegistry) error {
	logger := klog.FromContext(ctx)
	if err := o.Validate(); err != nil {
		return err
	}
	logger.Info("Starting proxy-operator", "version", Version(), "namespace", namespaceForLog(o.Namespace), "leaderElect", o.LeaderElect)

	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.UserAgent = "proxy-operator/" + Version()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	crawl, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("crawl.proxyfleet.io client: %w", err)
	}

	m := metrics.New()
	m.SetBuildInfo(Version())

	enabled, err := buildProviders(ctx, o.Providers, providers, ProviderEnv{KubeClient: kube, RESTConfig: rest.CopyConfig(cfg), Options: o})
	if err != nil {
		return stoppedOrFailed(ctx, err)
	}

	// No periodic resync: the controller polls instances on its own
	// schedule, and its handlers drop resyncs anyway.
	// trimForCache keeps the caches to what the operator reads (decision 120).
	kubeInformers := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace), informers.WithTransform(trimForCache))
	crawlInformers := crawlinformers.NewSharedInformerFactoryWithOptions(crawl, 0, crawlinformers.WithNamespace(o.Namespace), crawlinformers.WithTransform(trimForCache))
	proxyInformer := crawlInformers.Crawl().V1alpha1().Proxies()
	secretInformer := kubeInformers.Core().V1().Secrets()
	secrets := secretInformer.Lister()
	// The engine reports verdicts into the controller's queue and the
	// controller reads them back through Verdict, so each needs the other:
	// the engine is built first, reporting to verdicts, which is connected
	// to the controller as soon as it exists, before anything runs.
	verdicts := &controllerQueue{}
	engine, err := health.New(health.Config{
		Proxies: proxyInformer.Informer().GetIndexer(),
		Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
			return secrets.Secrets(namespace).Get(name)
		},
		Enqueue:                 verdicts.Enqueue,
		Workers:                 o.HealthWorkers,
		LatencyReportsPerSecond: o.latencyUpdatesPerSecond(),
		Metrics:                 m,
	})
	if err != nil {
		return fmt.Errorf("health engine: %w", err)
	}
	// One broadcaster for the process. It outlives ctx so that events of
	// the drain still go out; run shuts it down last.
	events := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	events.StartStructuredLogging(4)
	// A private scheme: events need our kinds, and the global scheme.Scheme
	// is shared by everything in the process.
	eventScheme := runtime.NewScheme()
	if err := crawlscheme.AddToScheme(eventScheme); err != nil {
		return fmt.Errorf("building the event scheme: %w", err)
	}
	ctrl, err := controller.NewController(controller.Config{
		CrawlClient:      crawl,
		KubeClient:       kube,
		ProxyInformer:    proxyInformer,
		SecretInformer:   secretInformer,
		Providers:        enabled,
		Health:           engine,
		Metrics:          m,
		WorkqueueMetrics: m.WorkqueueProvider(),
		Recorder:         events.NewRecorder(eventScheme, corev1.EventSource{Component: controller.FieldManager}),
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	verdicts.connect(ctrl)
	m.WatchProxies(proxyInformer.Lister(), o.Namespace)

	op := &operator{
		opts:           o,
		metrics:        m,
		controller:     ctrl,
		kubeInformers:  kubeInformers,
		crawlInformers: crawlInformers,
		synced:         []cache.InformerSynced{proxyInformer.Informer().HasSynced, secretInformer.Informer().HasSynced},
		labeler:        podLabeler{client: kube, namespace: o.PodNamespace, name: o.PodName},
		kube:           kube,
		health:         engine,
		events:         events,
	}
	// Built here, so that a bad configuration fails start-up, not the
	// first election won.
	op.collector, err = gc.New(gc.Config{
		Providers:     enabled,
		Proxies:       proxyInformer.Lister(),
		ProxiesSynced: proxyInformer.Informer().HasSynced,
		Live:          crawl,
		Interval:      o.GCInterval,
		Metrics:       m,
		Recorder:      events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "proxy-operator-gc"}),
	})
	if err != nil {
		return fmt.Errorf("garbage collection: %w", err)
	}
	if o.LeaderElect {
		// Lease renewals get a client of their own, with its own rate
		// limit, so a controller burst (a thousand status writes after a
		// failover) cannot delay them past the renew deadline. Its timeout
		// leaves room for a second attempt within the deadline.
		leCfg := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
		leCfg.Timeout = o.LeaderElectRenewDeadline / 2
		if op.electionClient, err = kubernetes.NewForConfig(leCfg); err != nil {
			return fmt.Errorf("leader election client: %w", err)
		}
		op.electionWatchdog = leaderelection.NewLeaderHealthzAdaptor(leaderHealthzTolerance)
	}

	var feedSynced cache.InformerSynced
	// The lease API's reviews get a client of their own, so that a flood of
	// new bearer tokens never spends the controller's API budget.
	authCfg := rest.AddUserAgent(rest.CopyConfig(cfg), "lease-auth")
	authCfg.QPS, authCfg.Burst = o.LeaseAuthQPS, o.LeaseAuthBurst
	authKube, err := kubernetes.NewForConfig(authCfg)
	if err != nil {
		return fmt.Errorf("lease API authentication client: %w", err)
	}
	if op.leases, feedSynced, err = newLeaseServer(ctx, o, kube, authKube, proxyInformer, secrets, m); err != nil {
		return stoppedOrFailed(ctx, err)
	}
	// The leader path waits for the lease feed too: it must know every Ready
	// proxy before it grants.
	op.synced = append(op.synced, feedSynced)

	// ProxyPools (pkg/pool), on the leader beside the Proxy controller.
	if op.pools, err = newPoolController(crawl, kube, crawlInformers, proxyInformer, secretInformer, op.leases, m); err != nil {
		return fmt.Errorf("pool controller: %w", err)
	}
	op.synced = append(op.synced, crawlInformers.Crawl().V1alpha1().ProxyPools().Informer().HasSynced)

	// Listen before anything runs, so a taken port fails start-up at once.
	ln, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	logger.Info("Serving metrics and health", "addr", ln.Addr().String())
	op.leaseListener, err = net.Listen("tcp", o.LeaseAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--lease-addr: %w", err)
	}
	logger.Info("Serving the lease API", "addr", op.leaseListener.Addr().String(), "auth", o.LeaseAuth)
	if err := op.listenGateway(o, m); err != nil { // gatewaywiring.go
		ln.Close()
		op.leaseListener.Close()
		return err
	}
	return op.run(ctx, ln)
}

// controllerQueue is the health engine's way into the controller's queue.
// The engine is built before the controller (which reads its verdicts), so
// the target is connected once, after both exist and before either runs.
type controllerQueue struct{ ctrl *controller.Controller }

func (q *controllerQueue) connect(ctrl *controller.Controller) { q.ctrl = ctrl }

// Enqueue is health.Config.Enqueue.
func (q *controllerQueue) Enqueue(key cache.ObjectName) { q.ctrl.Enqueue(key) }

// stoppedOrFailed is Run's answer to a start-up error: nil when the error
// only says that shutdown was requested (SIGTERM while waiting for the API
// server is a clean stop), err otherwise.
func stoppedOrFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		klog.FromContext(ctx).Info("Stopped during start-up")
		return nil
	}
	return err
}

// operator is one process's running parts.
type operator struct {
	opts Options
	// electionClient renews the leader-election Lease (not the crawler
	// leases of op.leases); nil without leader election.
	electionClient kubernetes.Interface
	metrics        *metrics.Metrics
	controller     *controller.Controller
	pools          *pool.Controller
	kubeInformers  informers.SharedInformerFactory
	crawlInformers crawlinformers.SharedInformerFactory
	// synced reports the caches /readyz and the leader wait for.
	synced []cache.InformerSynced
	// labeler marks this process's Pod as the leader for the lease Service.
	labeler podLabeler
	// leases is the lease API: served on every replica, answering /v1 calls
	// only while leading.
	leases        *lease.Server
	leaseListener net.Listener
	// health probes every proxy through itself, on the leader.
	health *health.Engine
	// collector collects orphans on the leader.
	collector *gc.Collector
	// events is the one event broadcaster: the controller and the
	// collector record through it; it writes to the API while leading.
	events record.EventBroadcaster
	// kube records the leader loops' events.
	kube kubernetes.Interface
	// gateway and its listener, nil without --gateway-addr (gatewaywiring.go).
	gateway         *gateway.Gateway
	gatewayListener net.Listener
	// electionWatchdog fails /healthz while this replica holds the leader
	// lease but has stopped renewing it; nil without leader election.
	electionWatchdog *leaderelection.HealthzAdaptor
}

// run starts the informers, then runs the metrics server and the leader
// path in one errgroup: either failing stops the other.
func (op *operator) run(ctx context.Context, metricsListener net.Listener) error {
	logger := klog.FromContext(ctx)

	// The informers outlive ctx: the controller's workers still read the
	// listers while they finish their items. They stop once the leader
	// path has returned.
	informerCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformers()
	// A restarted container keeps its Pod, and with it a leader label
	// from its previous life: clear it before anything else.
	if err := op.labeler.set(ctx, false); err != nil {
		logger.Error(err, "Clearing a stale leader label")
	}
	logger.V(2).Info("Starting informers")
	op.kubeInformers.StartWithContext(informerCtx)
	op.crawlInformers.StartWithContext(informerCtx)

	stopLogging := context.AfterFunc(ctx, func() { logger.V(2).Info("Shutdown requested: draining") })
	defer stopLogging()

	g, gctx := errgroup.WithContext(ctx)
	leaderDone := make(chan struct{})
	g.Go(func() error {
		defer close(leaderDone)
		defer func() {
			stopInformers()
			op.kubeInformers.Shutdown()
			op.crawlInformers.Shutdown()
			logger.V(2).Info("Informers stopped")
		}()
		if !op.opts.LeaderElect {
			return op.runUnelected(gctx)
		}
		return op.runElected(gctx)
	})
	g.Go(func() error {
		// The server stays up while the leader path drains, so probes and
		// scrapes see the shutdown; it goes last.
		return op.serveMetrics(gctx, metricsListener, leaderDone)
	})
	g.Go(func() error {
		// Non-leaders answer 503 NotLeader; the leader answers once runLeader
		// has called StartLeading. Shutdown wakes long polls with a 503.
		return op.leases.Serve(gctx, op.leaseListener)
	})
	if op.gateway != nil {
		g.Go(func() error { return op.gateway.Serve(gctx, op.gatewayListener) })
	}
	err := g.Wait()
	op.events.Shutdown() // after the drain, whose events it still takes
	if err == nil {
		logger.Info("Stopped")
	}
	return err
}

// runUnelected runs the leader path without an election (--leader-elect=false).
func (op *operator) runUnelected(ctx context.Context) error {
	op.metrics.SetLeader(true)
	defer op.metrics.SetLeader(false)
	if err := op.runLeader(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	return errors.New("leader loops stopped before shutdown was requested")
}

// runElected campaigns for the Lease and runs the leader path while it holds
// it. The lease is released only after the leader path has returned, so no
// standby takes over while a worker of this one is still writing.
func (op *operator) runElected(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	// The suffix tells two processes on one host (or a restarted container
	// in the same Pod) apart.
	identity := hostname + "_" + utilrand.String(8)

	// Two contexts besides ctx (the shutdown request), one for each thing
	// the shutdown order has to end separately:
	//   - electionCtx bounds the elector. It ends only when we say so, not
	//     with ctx, so that the lease is renewed while the leader path
	//     drains and released after it has returned.
	//   - termCtx bounds the leader path: it ends on shutdown (ctx), or
	//     with errLostLease as its cause once the elector stops leading.
	electionCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	termCtx, endTerm := context.WithCancelCause(ctx)
	defer endTerm(nil)

	started := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: op.opts.LeaderElectNamespace, Name: LeaseName},
			Client:     op.electionClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   op.opts.LeaderElectLeaseDuration,
		RenewDeadline:   op.opts.LeaderElectRenewDeadline,
		RetryPeriod:     op.opts.LeaderElectRetryPeriod,
		ReleaseOnCancel: true,
		Name:            LeaseName,
		WatchDog:        op.electionWatchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			// The elector's own context for the term ends when it stops
			// leading; it ends termCtx with it.
			OnStartedLeading: func(heldCtx context.Context) {
				op.metrics.SetLeader(true)
				context.AfterFunc(heldCtx, func() { endTerm(errLostLease) })
				close(started)
			},
			OnStoppedLeading: func() { op.metrics.SetLeader(false) },
			OnNewLeader: func(holder string) {
				logger.V(2).Info("Leader observed", "identity", holder, "self", holder == identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// RunOrDie would do this; Run does not.
	op.electionWatchdog.SetLeaderElection(elector)

	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electionCtx)
	}()
	stopElection := func() {
		stopElecting()
		<-electorDone // with ReleaseOnCancel, Run clears the holder before it returns
		logger.V(2).Info("Leader election stopped; lease released if held", "lease", op.opts.LeaderElectNamespace+"/"+LeaseName)
	}
	logger.V(2).Info("Campaigning for the leader lease", "lease", op.opts.LeaderElectNamespace+"/"+LeaseName, "identity", identity)

	select {
	case <-ctx.Done():
		stopElection()
		return nil
	case <-started:
	}
	logger.Info("Started leading", "identity", identity)

	leadErr := op.runLeader(termCtx)
	// Read before stopElection, whose release ends the term too.
	lost := ctx.Err() == nil && errors.Is(context.Cause(termCtx), errLostLease)
	endTerm(nil)
	stopElection()

	switch {
	case lost:
		return errLostLease
	case leadErr != nil:
		return leadErr
	case ctx.Err() == nil:
		return errors.New("leader loops stopped before shutdown was requested")
	}
	return nil
}

// runLeader runs what only the leader may run, until ctx ends, and returns
// once all of it has stopped. Leader-only loops join here, in this errgroup:
//   - the health engine (pkg/health, --health-workers), reporting to
//     op.controller.Enqueue;
//   - orphan collection every --gc-interval (pkg/gc);
//   - the lease API's leader side (pkg/lease, --lease-auth): it is served
//     on --lease-addr by every replica, and answers /v1 calls and its
//     /readyz only while this one leads (decision 27).
func (op *operator) runLeader(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	// Wait here rather than in the controller alone, so that a shutdown
	// before the caches sync is a clean stop, not a start-up failure.
	logger.V(2).Info("Waiting for informer caches")
	if !cache.WaitForCacheSync(ctx.Done(), op.synced...) {
		logger.V(2).Info("Stopped before the informer caches synced")
		return nil
	}
	// The lease API leads before the Service can route to us (the label).
	if err := op.leases.StartLeading(ctx); err != nil {
		return nil // ctx ended while claiming the watermark
	}
	defer func() {
		if err := op.leases.StopLeading(context.WithoutCancel(ctx)); err != nil {
			logger.Error(err, "Persisting the lease watermark on the way out")
		}
	}()
	if err := untilAPIAnswers(ctx, "leader label", func(ctx context.Context) error { return op.labeler.set(ctx, true) }); err != nil {
		if ctx.Err() != nil {
			return nil // stopped leading, or shutting down, before the label was set
		}
		return err // the lease Service could not reach us
	}
	defer func() {
		if err := op.labeler.set(context.WithoutCancel(ctx), false); err != nil {
			logger.Error(err, "Removing the leader label")
		}
	}()
	// Only the leader records events; they reach the API from here on.
	eventSink := op.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: op.kube.CoreV1().Events("")})
	defer eventSink.Stop()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer logger.V(2).Info("Controller stopped: workers finished their items")
		return op.controller.Run(ctx, op.opts.Workers)
	})
	g.Go(func() error {
		defer logger.V(2).Info("Pool controller stopped")
		return op.pools.Run(ctx, op.opts.Workers)
	})
	g.Go(func() error {
		defer logger.V(2).Info("Health engine stopped")
		return op.health.Run(ctx)
	})
	g.Go(func() error {
		defer logger.V(2).Info("Garbage collection stopped")
		return op.collector.Run(ctx)
	})
	err := g.Wait()
	logger.V(2).Info("Leader loops stopped")
	return err
}

// serveMetrics serves /metrics, /healthz and /readyz until stop closes (the
// leader path is done) and then shuts down gracefully. ctx only carries the
// logger: the server outlives the shutdown request on purpose.
func (op *operator) serveMetrics(ctx context.Context, ln net.Listener, stop <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", op.metrics.Handler())
	mux.HandleFunc("GET /healthz", op.serveHealthz)
	mux.HandleFunc("GET /readyz", op.serveReadyz)
	if op.opts.Profiling {
		registerProfiling(mux)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("metrics server on %s: %w", ln.Addr(), err)
	case <-stop:
	}
	logger.V(2).Info("Shutting down the metrics server")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	<-served // http.ErrServerClosed once Shutdown began
	if err != nil {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	logger.V(2).Info("Metrics server stopped")
	return nil
}

// serveReadyz is 200 once the informer caches have synced, on every replica;
// it follows nothing else (not leadership: a standby with warm caches is
// ready to take over).
// serveHealthz answers ok, unless this replica leads without renewing the
// lease (client-go's WatchDog): then the kubelet restarts it, as it does
// kube-controller-manager.
func (op *operator) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if op.electionWatchdog != nil {
		if err := op.electionWatchdog.Check(r); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "leader election: %v\n", err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (op *operator) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, synced := range op.synced {
		if !synced() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "informer caches not synced")
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// restConfig loads --kubeconfig, else $KUBECONFIG (a list of files, as
// kubectl reads it), else the in-cluster config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	source := "--kubeconfig " + kubeconfig
	switch env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case kubeconfig != "":
		rules.ExplicitPath = kubeconfig
	case env != "":
		rules.Precedence = filepath.SplitList(env)
		source = "$KUBECONFIG"
	default:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or $KUBECONFIG, and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return cfg, nil
}

func namespaceForLog(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// newLeaseServer builds the lease API: the store fed by the Proxy informer,
// the authenticator of --lease-auth, credentials from the spec.auth Secrets,
// and the watermark a successor reads after a leader change.
func newLeaseServer(ctx context.Context, o Options, kube, authKube kubernetes.Interface, proxies crawlinformersv1alpha1.ProxyInformer, secrets corelisters.SecretLister, m *metrics.Metrics) (*lease.Server, cache.InformerSynced, error) {
	// Every replica signs and verifies lease IDs with one key, created by
	// the first replica to start.
	var key []byte
	err := untilAPIAnswers(ctx, "lease signing key", func(ctx context.Context) (err error) {
		key, err = lease.EnsureKey(ctx, kube, o.LeaderElectNamespace, LeaseKeySecret)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lease signing key: %w", err)
	}
	store, err := lease.NewStore(lease.Config{
		Key:        key,
		DefaultTTL: o.LeaseDefaultTTL,
		MinTTL:     o.LeaseMinTTL,
		MaxTTL:     o.LeaseMaxTTL,
		Metrics:    m,

		MaxLeasesPerOwner: o.LeaseMaxPerIdentity,
		MaxSessions:       o.LeaseMaxSessions,
		MaxCooldowns:      o.LeaseMaxCooldowns,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lease store: %w", err)
	}
	feed, err := lease.NewFeed(store, proxies)
	if err != nil {
		return nil, nil, fmt.Errorf("lease feed: %w", err)
	}
	var auth interface {
		lease.Authenticator
		lease.Authorizer
	}
	if o.LeaseAuth == LeaseAuthNone {
		auth = lease.NewNoAuth(klog.FromContext(ctx))
	} else {
		auth = lease.NewKubernetesAuth(authKube, lease.KubernetesAuthOptions{})
	}
	hostname, _ := os.Hostname()
	srv, err := lease.NewServer(lease.ServerConfig{
		Store:         store,
		Authenticator: auth,
		Authorizer:    auth,
		Credentials:   lease.SecretCredentials(secrets),
		Horizon:       lease.NewConfigMapHorizon(kube, o.LeaderElectNamespace, LeaseHorizonConfigMap, hostname),
	})
	return srv, feed.HasSynced, err
}
