package health

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Defaults of Config.
const (
	// DefaultWorkers bounds the probes in flight. A pool keeps its schedule
	// while Workers > probes/s × seconds per probe (Little's law). Sized for
	// 10,000 proxies at the default 30s interval (333 probes/s): at ~0.3s a
	// probe through a remote proxy (dial, CONNECT, TLS) that keeps ~100
	// workers busy, ~270 when a tenth of the fleet hangs until the 5s
	// timeout; 512 leaves headroom. pkg/testsuites/bench/health measures the edge:
	// 1,000 probes/s of 0.2s keep the schedule, of 0.7s do not. An idle
	// worker is a parked goroutine.
	DefaultWorkers = 512
	// DefaultTick is how often the scheduler looks for due probes; a probe
	// starts up to one tick after its due time.
	DefaultTick = time.Second
	// DefaultMinReportInterval rate-limits reports of latency changes.
	DefaultMinReportInterval = time.Minute
	// DefaultLatencyReportsPerSecond is the fleet-wide budget of reports of
	// a latency change alone (first verdicts and flips are never held
	// back): 5% of the default --kube-api-qps, so that on a noisy network a
	// large fleet's latency updates cannot crowd out the writes that matter.
	DefaultLatencyReportsPerSecond = 5
	// latencyReportBurst lets a few latency changes through at once.
	latencyReportBurst = 20
	// DefaultLatencyReportsPerProxyHour scales the latency budget with the
	// fleet (docs/decisions/0122-latency-budget-scales-fleet-at-most.md): the fleet's latency-only reports average at
	// most this many per probed proxy per hour, below the cap of
	// LatencyReportsPerSecond.
	DefaultLatencyReportsPerProxyHour = 1
)

// queueFactor sizes the queue of due probes: queueFactor × Workers.
const queueFactor = 4

// Config is what an Engine needs. Zero values take the defaults above.
type Config struct {
	// Proxies is the informer's cache of Proxies (its GetIndexer()). A
	// pass reads it whole every tick: the store's List, not a lister's,
	// whose typed copy grew a slice of the fleet from nothing each tick,
	// half of the pass's garbage (docs/decisions/0167-probe-leaves-third-less-garbage-scheduling.md).
	Proxies cache.Store
	// Secrets reads the spec.auth Secret of a proxy (from an informer cache
	// in the operator). Nil fails every probe of a proxy with spec.auth.
	Secrets func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Enqueue puts a proxy's key on the controller's queue; it is called
	// when a verdict worth writing into status was reported.
	Enqueue func(cache.ObjectName)
	// Workers bounds the probes in flight. Default DefaultWorkers.
	Workers int
	// MaxProbesPerEndpoint bounds the probes in flight through one proxy
	// address (host:port). Default DefaultMaxProbesPerEndpoint.
	MaxProbesPerEndpoint int
	// Tick is the scheduler's period. Default DefaultTick.
	Tick time.Duration
	// MinReportInterval is the least time between two reports of a latency
	// change of the same proxy. Default DefaultMinReportInterval.
	MinReportInterval time.Duration
	// LatencyReportsPerSecond bounds the reports of a latency change alone
	// across the fleet. Default DefaultLatencyReportsPerSecond.
	LatencyReportsPerSecond float64
	// LatencyReportsPerProxyHour scales that budget with the fleet: at most
	// this many latency-only reports per probed proxy per hour, fleet-wide,
	// whichever of the two is lower. Default
	// DefaultLatencyReportsPerProxyHour.
	LatencyReportsPerProxyHour float64
	// Clock schedules probes and stamps them. Default the real clock.
	Clock clock.WithTicker
	// Metrics receives measurements. Default NoMetrics.
	Metrics Metrics
	// Logger is used by Run; the zero value means klog.FromContext(ctx).
	Logger klog.Logger
	// RootCAs verify the certificates of https targets (and https proxies);
	// nil means the system roots. Tests set it to trust a local CA.
	RootCAs *x509.CertPool
	// Providers are the enabled providers, asked whether a proxy's instance
	// is configured with its credentials (then it must refuse a request
	// without them) and what to say when they are refused. Nil: every
	// Managed instance is.
	Providers provider.Set
	// GeoIP maps an exit IP to its country when the health check's answer
	// names none (the operator's --geoip-database). Nil: only the answer.
	GeoIP CountryLookup
}

// Engine probes proxies and keeps their verdicts. It implements
// controller.HealthSource.
type Engine struct {
	proxies           cache.Store
	secrets           func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	enqueue           func(cache.ObjectName)
	workers           int
	tick              time.Duration
	minReportInterval time.Duration
	// latencyBudget is the fleet-wide bucket of latency-only reports,
	// read with the engine's clock; guarded by mu. Its rate is
	// min(latencyRateCap, probed proxies × latencyPerProxyHour / 3600),
	// set on every pass.
	latencyBudget                       *rate.Limiter
	latencyRateCap, latencyPerProxyHour float64
	clock                               clock.WithTicker
	metrics                             Metrics
	logger                              klog.Logger
	rootCAs                             *x509.CertPool
	providers                           provider.Set

	// probe is Probe; unit tests script it.
	probe func(context.Context, Target) Result
	// leaseKeys parses the credentials Secrets' lease keys once each.
	leaseKeys leasecred.KeyCache
	// geo is Config.GeoIP.
	geo     CountryLookup
	running atomic.Bool

	mu     sync.RWMutex
	states map[cache.ObjectName]*proxyState
	// byObject finds the state of a cached object a pass has met before by
	// the object's pointer, which hashes for a fraction of its name
	// (docs/decisions/0162-scheduling-pass-finds-proxy-state-cached.md): an entry per state, for the object in st.obj.
	byObject map[*crawlv1alpha1.Proxy]*proxyState
	// jitter spreads the first probes of the fleet met on the first pass;
	// guarded by mu.
	jitter *rand.Rand
	// metFleet is set once the first pass of this Run has met the fleet:
	// proxies met later are new, probed at once (docs/decisions/0121-proxy-created-while-engine-runs-probed.md). Guarded by
	// mu.
	metFleet bool
	// pass numbers the scheduling passes, so that a pass can tell the
	// states it met (proxyState.pass) from those whose Proxy is gone
	// without building a set of the fleet on every tick. Guarded by mu.
	pass uint64
	// endpoints hold the jobs waiting for a probe of their address to
	// finish. Guarded by mu.
	endpoints endpointQueues
	// due is the pass's list of due jobs, kept between passes so that a
	// pass allocates none (docs/decisions/0164-engine-own-work-probe-measured-alone.md). Guarded by mu.
	due []job
}

// New validates cfg and applies defaults. It starts nothing.
func New(cfg Config) (*Engine, error) {
	if cfg.Proxies == nil {
		return nil, errors.New("health: Config.Proxies is required")
	}
	if cfg.Enqueue == nil {
		return nil, errors.New("health: Config.Enqueue is required")
	}
	if cfg.Workers < 0 || cfg.MaxProbesPerEndpoint < 0 || cfg.Tick < 0 || cfg.MinReportInterval < 0 || cfg.LatencyReportsPerSecond < 0 || cfg.LatencyReportsPerProxyHour < 0 {
		return nil, fmt.Errorf("health: Workers (%d), MaxProbesPerEndpoint (%d), Tick (%v), MinReportInterval (%v), LatencyReportsPerSecond (%v) and LatencyReportsPerProxyHour (%v) must not be negative",
			cfg.Workers, cfg.MaxProbesPerEndpoint, cfg.Tick, cfg.MinReportInterval, cfg.LatencyReportsPerSecond, cfg.LatencyReportsPerProxyHour)
	}
	latencyRate := cfg.LatencyReportsPerSecond
	if latencyRate == 0 {
		latencyRate = DefaultLatencyReportsPerSecond
	}
	e := &Engine{
		proxies:             cfg.Proxies,
		secrets:             cfg.Secrets,
		enqueue:             cfg.Enqueue,
		workers:             orDefault(cfg.Workers, DefaultWorkers),
		tick:                orDefault(cfg.Tick, DefaultTick),
		minReportInterval:   orDefault(cfg.MinReportInterval, DefaultMinReportInterval),
		latencyBudget:       rate.NewLimiter(rate.Limit(latencyRate), latencyReportBurst),
		latencyRateCap:      latencyRate,
		latencyPerProxyHour: orDefault(cfg.LatencyReportsPerProxyHour, DefaultLatencyReportsPerProxyHour),
		clock:               cfg.Clock,
		metrics:             cfg.Metrics,
		logger:              cfg.Logger,
		rootCAs:             cfg.RootCAs,
		providers:           cfg.Providers,
		probe:               Probe,
		geo:                 cfg.GeoIP,
		states:              map[cache.ObjectName]*proxyState{},
		byObject:            map[*crawlv1alpha1.Proxy]*proxyState{},
		endpoints:           newEndpointQueues(orDefault(cfg.MaxProbesPerEndpoint, DefaultMaxProbesPerEndpoint)),
		jitter:              rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.metrics == nil {
		e.metrics = NoMetrics{}
	}
	return e, nil
}

// Verdict returns the latest verdict reported for the proxy, with the
// address it was measured against; false before the first one, and for a
// proxy the engine does not probe.
func (e *Engine) Verdict(key cache.ObjectName) (Verdict, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	st, ok := e.states[key]
	if !ok || st.reported == nil {
		return Verdict{}, false
	}
	return *st.reported, true
}

// Run schedules and runs probes until ctx ends, then waits for the workers
// and forgets every verdict (a process that stops leading must not serve
// stale ones). The operator runs it on the leader only.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("health: the engine is already running")
	}
	defer e.running.Store(false)
	logger := e.logger
	if logger.GetSink() == nil {
		logger = klog.FromContext(ctx)
	}
	logger = logger.WithName("health")
	ctx = klog.NewContext(ctx, logger)

	e.resetStates()
	defer e.resetStates()

	// The queue lets a tick hand out more probes than there are idle
	// workers at that instant: without it a tick could start at most
	// Workers probes however fast they finish, capping the engine at
	// Workers per Tick (512/s, half of what the benchmark asked). A full
	// queue means a saturated pool.
	jobs := make(chan job, queueFactor*e.workers)
	var wg sync.WaitGroup
	for range e.workers {
		wg.Go(func() { e.work(ctx, jobs) })
	}
	ticker := e.clock.NewTicker(e.tick)
	logger.Info("Health engine started", "workers", e.workers, "maxProbesPerEndpoint", e.endpoints.limit, "tick", e.tick)

	// A send fails when the queue is full: the probe stays due, and the
	// next tick tries again.
	dispatch := func(j job) bool {
		select {
		case jobs <- j:
			return true
		default:
			return false
		}
	}
	e.schedule(ctx, e.clock.Now(), dispatch)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C():
			e.schedule(ctx, e.clock.Now(), dispatch)
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	logger.Info("Health engine stopped")
	return nil
}

func (e *Engine) resetStates() {
	e.mu.Lock()
	e.states = map[cache.ObjectName]*proxyState{}
	e.byObject = map[*crawlv1alpha1.Proxy]*proxyState{}
	e.endpoints = newEndpointQueues(e.endpoints.limit)
	e.metFleet = false
	e.mu.Unlock()
}
