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
	"os"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/crawlpolicy"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/lease/replica"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
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
// o holds the providers compiled into the binary (NewOptions); --providers
// picks the enabled ones. Each step is in assemble.go; every part is built before anything runs, so
// a bad configuration fails start-up, not the first election won.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting proxy-operator", "version", Version(), "namespace", namespaceForLog(o.Namespace), "leaderElect", o.LeaderElect)
	geo, err := openGeoIP(ctx, o.GeoIPDatabase)
	if err != nil {
		return err
	}
	c, err := newClients(o)
	if err != nil {
		return err
	}
	m := metrics.New(metricLabels())
	m.SetBuildInfo(Version())
	enabled, err := buildProviders(ctx, o, providerEnv(c.kube, o))
	if err != nil {
		return stoppedOrFailed(ctx, err)
	}
	op, err := newOperator(ctx, o, c, enabled, geo, m)
	if err != nil {
		return stoppedOrFailed(ctx, err)
	}
	metricsListener, err := op.listen(ctx, o, m)
	if err != nil {
		return err
	}
	return op.run(ctx, metricsListener)
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
	// dashboardInformers cache the events the dashboard shows and, under
	// --lease-auth=kubernetes, the RoleBindings that say whom to review.
	dashboardInformers []informers.SharedInformerFactory
	// synced reports the caches /readyz and the leader wait for.
	synced []cache.InformerSynced
	// labeler marks this process's Pod as the leader for the lease Service.
	labeler podLabeler
	// leases is the lease API: served on every replica, answering /v1 calls
	// only while leading.
	leases        *server.Server
	leaseListener net.Listener
	// replica is the lease store's replication (--lease-replication=raft);
	// nil without.
	replica *replica.Node
	// leasePush tells the instances that check lease credentials of their
	// leases' ends and renewals. It runs on every replica: the ends come
	// from the replica whose store decides, the signings from whichever
	// replica served the call (with a replicated store, a follower serves
	// the calls it forwards to the leader's).
	leasePush *push.Pusher
	// health probes every proxy through itself, on the leader.
	health *health.Engine
	// collector collects orphans on the leader.
	collector *gc.Collector
	// events is the one event broadcaster: the controller and the
	// collector record through it; it writes to the API while leading.
	events record.EventBroadcaster
	// kube records the leader loops' events.
	kube kubernetes.Interface
	// electionWatchdog fails /healthz while this replica holds the leader
	// lease but has stopped renewing it; nil without leader election.
	electionWatchdog *leaderelection.HealthzAdaptor
	// fence stops the lease store once this replica may no longer lead
	// (fence.go); nil without leader election.
	fence *leadershipFence
	// policyStatus writes the CrawlPolicies' status on the leader.
	policyStatus *crawlpolicy.StatusWriter
	// dashboard keeps the web UI's view (/ui/ on the lease API's port) on
	// every replica.
	dashboard *dashboard.Hub
	// dashboardHistory samples each pool for the dashboard's charts.
	dashboardHistory *dashboard.History
	// inspectionCA keeps the inspected namespaces' CAs on the leader; nil
	// without --inspection-ca-namespace.
	inspectionCA *inspectionCA
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
	for _, f := range op.dashboardInformers {
		f.StartWithContext(informerCtx)
	}

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
			for _, f := range op.dashboardInformers {
				f.Shutdown()
			}
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
	leasesDone := make(chan struct{})
	g.Go(func() error {
		// Non-leaders answer 503 NotLeader (or forward, with a replicated
		// store); the leader answers once runLeader has called
		// StartLeading. Shutdown wakes long polls with a 503.
		defer close(leasesDone)
		return op.leases.Serve(gctx, op.leaseListener)
	})
	if op.replica != nil {
		g.Go(func() error { return op.runReplica(gctx, leasesDone) })
	}
	g.Go(func() error {
		// On every replica (see operator.leasePush); it drops what is
		// pending when ctx ends.
		defer logger.V(2).Info("Lease pushes stopped")
		return op.leasePush.Run(gctx)
	})
	g.Go(func() error { return op.dashboard.Run(gctx) })
	g.Go(func() error { return op.dashboardHistory.Run(gctx) })
	err := g.Wait()
	op.events.Shutdown() // after the drain, whose events it still takes
	if err == nil {
		logger.Info("Stopped")
	}
	return err
}

// runReplica runs the lease store's replica and its membership until ctx
// ends, then hands the lead on (a planned stop: the successor grants at
// once) and stops Raft once the lease API has drained: its last calls
// still reach the new leader. Losing the lead otherwise ends the process.
func (op *operator) runReplica(ctx context.Context, leasesDone <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	o := op.opts.Replication
	advertise, _ := o.advertise()
	m := &membership{node: op.replica, kube: op.kube, namespace: op.opts.PodNamespace, pod: op.opts.PodName,
		selector: o.ReplicaSelector, advertise: advertise, id: o.ReplicaID, dir: o.RaftDir, markerNamespace: op.opts.LeaderElectNamespace}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.run(gctx) })
	g.Go(func() error { return op.replica.Run(gctx) })
	err := g.Wait()
	shutdown := func() {
		<-leasesDone
		if serr := op.replica.Shutdown(); serr != nil {
			logger.Error(serr, "Stopping the lease store's replica")
		}
	}
	if ctx.Err() == nil {
		// The replica stopped on its own (it lost the lead, or the group
		// regrouped): the process stops, and the replica with it once the
		// lease API has drained.
		go shutdown()
		return err
	}
	// A planned stop; losing the lead on the way is expected.
	if op.replica.Deciding() {
		start := time.Now()
		if terr := op.replica.TransferLeadership(); terr != nil {
			logger.Error(terr, "Handing the lease store's lead on")
		} else {
			logger.Info("Handed the lease store's lead on", "took", time.Since(start))
		}
	}
	shutdown()
	return nil
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
// standby takes over while a worker of this one is still writing. It reads
// better whole: the elector's timing, its callbacks and the release after
// the leader path are one protocol.
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
		Lock: op.fence.wrap(&resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: op.opts.LeaderElectNamespace, Name: LeaseName},
			Client:     op.electionClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		}),
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

	if op.replica != nil {
		// With a replicated lease store, the controllers run where it is
		// decided: campaign only while this replica leads the Raft group.
		if err := op.waitToDecide(ctx); err != nil {
			return nil
		}
	}
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
	if op.replica != nil && !op.replica.Deciding() {
		// Controllers lead where the lease store leads; this replica won
		// the Lease while another leads the store: step back.
		logger.Info("Won the leader Lease while another replica leads the lease store; stepping back")
		endTerm(nil)
		stopElection()
		return errLostLease
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
//   - the CrawlPolicies' status (pkg/crawlpolicy);
//   - the lease API's leader side (pkg/lease/server, --lease-auth): it is served
//     on --lease-addr by every replica, and answers /v1 calls and its
//     /readyz only while this one leads (docs/decisions/0027-lease-api-serves-every-replica.md).
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
		return nil // ctx ended while claiming the horizon
	}
	defer func() {
		if err := op.leases.StopLeading(context.WithoutCancel(ctx)); err != nil {
			logger.Error(err, "Persisting the lease horizon on the way out")
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
	g.Go(func() error {
		defer logger.V(2).Info("Crawl policy status stopped")
		return op.policyStatus.Run(ctx)
	})
	if op.inspectionCA != nil {
		g.Go(func() error {
			defer logger.V(2).Info("Inspection CA keeper stopped")
			return op.inspectionCA.run(ctx)
		})
	}
	err := g.Wait()
	logger.V(2).Info("Leader loops stopped")
	return err
}

func namespaceForLog(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}
