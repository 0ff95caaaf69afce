package health

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
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
	// fleet (decision 122): the fleet's latency-only reports average at
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
	// half of the pass's garbage (decision 167).
	Proxies cache.Store
	// Secrets reads the spec.auth Secret of a proxy (from an informer cache
	// in the operator). Nil fails every probe of a proxy with spec.auth.
	Secrets func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Enqueue puts a proxy's key on the controller's queue; it is called
	// when a verdict worth writing into status was reported.
	Enqueue func(cache.ObjectName)
	// Workers bounds the probes in flight. Default DefaultWorkers.
	Workers int
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

	// probe is Probe; unit tests script it.
	probe   func(context.Context, Target) Result
	running atomic.Bool

	mu     sync.RWMutex
	states map[cache.ObjectName]*proxyState
	// byObject finds the state of a cached object a pass has met before by
	// the object's pointer, which hashes for a fraction of its name
	// (decision 162): an entry per state, for the object in st.obj.
	byObject map[*crawlv1alpha1.Proxy]*proxyState
	// jitter spreads the first probes of the fleet met on the first pass;
	// guarded by mu.
	jitter *rand.Rand
	// metFleet is set once the first pass of this Run has met the fleet:
	// proxies met later are new, probed at once (decision 121). Guarded by
	// mu.
	metFleet bool
	// pass numbers the scheduling passes, so that a pass can tell the
	// states it met (proxyState.pass) from those whose Proxy is gone
	// without building a set of the fleet on every tick. Guarded by mu.
	pass uint64
	// due is the pass's list of due jobs, kept between passes so that a
	// pass allocates none (decision 164). Guarded by mu.
	due []job
}

var _ controller.HealthSource = (*Engine)(nil)

// proxyState is what the engine knows of one proxy instance at one address.
type proxyState struct {
	key     cache.ObjectName
	uid     string
	address string
	// interval is the one due was computed with.
	interval time.Duration
	due      time.Time
	inFlight bool
	counters counters
	// reported is the snapshot Verdict returns, nil before the first
	// verdict; reportedAt is when it was reported.
	reported   *controller.HealthVerdict
	reportedAt time.Time
	// pass is the last scheduling pass that met this proxy in the cache,
	// obj the cached object it met.
	pass uint64
	obj  *crawlv1alpha1.Proxy
	// gone: the state was pruned or replaced, so a probe in flight for it
	// records nothing.
	gone bool
}

// job is one probe handed to a worker.
type job struct {
	key   cache.ObjectName
	state *proxyState
	// check is resolved from the cached object when the probe is due, not
	// kept in the state: 10,000 kept checks are ~3 MB of live heap, more
	// than the 0.6% of the engine's CPU they save is worth (decision 164).
	check check
	due   time.Time
	// proveClosed: probe without credentials too, because the proxy is
	// not healthy yet and its check says it must refuse anonymous requests.
	proveClosed bool
}

// New validates cfg and applies defaults. It starts nothing.
func New(cfg Config) (*Engine, error) {
	if cfg.Proxies == nil {
		return nil, errors.New("health: Config.Proxies is required")
	}
	if cfg.Enqueue == nil {
		return nil, errors.New("health: Config.Enqueue is required")
	}
	if cfg.Workers < 0 || cfg.Tick < 0 || cfg.MinReportInterval < 0 || cfg.LatencyReportsPerSecond < 0 || cfg.LatencyReportsPerProxyHour < 0 {
		return nil, fmt.Errorf("health: Workers (%d), Tick (%v), MinReportInterval (%v), LatencyReportsPerSecond (%v) and LatencyReportsPerProxyHour (%v) must not be negative",
			cfg.Workers, cfg.Tick, cfg.MinReportInterval, cfg.LatencyReportsPerSecond, cfg.LatencyReportsPerProxyHour)
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
		probe:               Probe,
		states:              map[cache.ObjectName]*proxyState{},
		byObject:            map[*crawlv1alpha1.Proxy]*proxyState{},
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
func (e *Engine) Verdict(key cache.ObjectName) (controller.HealthVerdict, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	st, ok := e.states[key]
	if !ok || st.reported == nil {
		return controller.HealthVerdict{}, false
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
	logger.Info("Health engine started", "workers", e.workers, "tick", e.tick)

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
	e.metFleet = false
	e.mu.Unlock()
}

// schedule is one tick: it brings the per-proxy states in line with the
// cache and dispatches the due probes.
func (e *Engine) schedule(ctx context.Context, now time.Time, dispatch func(job) bool) {
	logger := klog.FromContext(ctx)
	objs := e.proxies.List()
	var (
		forget                      []cache.ObjectName
		skipped                     int
		healthy, unhealthy, unknown int
	)
	e.mu.Lock()
	e.pass++
	due := e.due[:0]
	met := 0 // states marked with this pass
	for _, obj := range objs {
		p, ok := obj.(*crawlv1alpha1.Proxy)
		if !ok {
			continue // the informer's cache holds only Proxies
		}
		st := e.byObject[p]
		if st == nil {
			// New, or changed since the last pass: the informer replaces a
			// cached object on every update and never edits one, so the
			// same pointer means nothing below can differ (decision 157).
			key := cache.MetaObjectToName(p)
			var replaced bool
			if st, replaced = e.meet(ctx, p, key, e.states[key], now); replaced {
				forget = append(forget, key)
			}
			if st == nil {
				continue // its state, if any, is pruned below
			}
		}
		if st.pass != e.pass {
			st.pass = e.pass
			met++
		}
		switch st.counters.verdict {
		case verdictHealthy:
			healthy++
		case verdictUnhealthy:
			unhealthy++
		default:
			unknown++
		}

		if !st.inFlight && !now.Before(st.due) {
			c := checkFor(p, st.address, e.rootCAs)
			// Only on the way to healthy: an instance is proved closed
			// before its first Ready (a replaced one starts over), and a
			// healthy fleet pays for one probe each, not two.
			prove := c.mustRefuseAnonymous && st.counters.verdict != verdictHealthy
			due = append(due, job{key: st.key, state: st, check: c, due: st.due, proveClosed: prove})
		}
	}
	// Every state met is marked, so in a steady fleet there is none to
	// look for: a pass costs no walk of the states (decision 157).
	if met != len(e.states) {
		for key, st := range e.states {
			if st.pass != e.pass {
				e.dropLocked(st)
				forget = append(forget, key)
			}
		}
	}
	// The most overdue first: when the pool cannot take them all, those
	// left waiting are the ones that waited least.
	slices.SortFunc(due, func(a, b job) int { return a.due.Compare(b.due) })
	for i, j := range due {
		if !dispatch(j) {
			skipped = len(due) - i
			break
		}
		j.state.inFlight = true
		j.state.due = nextDue(j.due, j.check.interval, now)
	}
	// Kept for the next pass, without the states it points at.
	clear(due)
	e.due = due[:0]
	e.metFleet = true
	e.latencyBudget.SetLimitAt(now, latencyRate(e.latencyRateCap, e.latencyPerProxyHour, healthy+unhealthy+unknown))
	e.mu.Unlock()

	for _, key := range forget {
		e.metrics.ForgetProxy(key)
	}
	for range skipped {
		e.metrics.ProbeDispatchSkipped()
	}
	if skipped > 0 {
		logger.V(4).Info("Probe queue full; due probes wait for the next tick", "skipped", skipped)
	}
	e.metrics.SetProxiesByVerdict(healthy, unhealthy, unknown)
}

// meet brings the state of p, whose cached object changed since the last
// pass or is new to it, in line with it: st is its state so far (nil if
// none). It returns nil for a proxy the engine does not probe (no address
// yet, or deleting), whose state the pass then prunes. A replaced instance
// or a new address starts over (replaced: its metrics are forgotten); an
// edited interval applies from now.
func (e *Engine) meet(ctx context.Context, p *crawlv1alpha1.Proxy, key cache.ObjectName, st *proxyState, now time.Time) (_ *proxyState, replaced bool) {
	address, ok := proxyAddress(p)
	if !ok || p.DeletionTimestamp != nil {
		return nil, false
	}
	interval := intervalOf(p)
	known := st != nil
	if known && (st.uid != string(p.UID) || st.address != address) {
		// A replaced instance starts with fresh counters, and its
		// predecessor's verdict must not stand for it.
		klog.FromContext(ctx).V(4).Info("Proxy has a new address or instance: starting over", "proxy", klog.KObj(p), "address", address)
		e.dropLocked(st)
		st, replaced = nil, true
	}
	if st == nil {
		st = e.newState(p, key, address, interval, now, !known)
		e.states[key] = st
	}
	if interval != st.interval {
		// An edited interval applies from now, not after the old one.
		st.due = minTime(st.due, now.Add(interval))
		st.interval = interval
	}
	delete(e.byObject, st.obj)
	st.obj = p
	e.byObject[p] = st
	return st, replaced
}

// dropLocked forgets st, pruned or replaced: a probe in flight for it
// records nothing.
func (e *Engine) dropLocked(st *proxyState) {
	if e.states[st.key] == st {
		delete(e.states, st.key)
	}
	delete(e.byObject, st.obj)
	st.gone = true
}

// newState starts tracking a proxy. On the first pass of a Run (a new
// leader meeting the whole fleet at once) the first probe is due at a
// uniformly random point of the first interval, so that the fleet is not
// probed all in the same tick; a proxy met on a later pass (created, or
// given a new instance or address, while the engine runs) is due at once:
// nobody has a verdict for it, and its creator waits for one (decision
// 121). Many of those at once are paced by the pool, most overdue first.
// seed is true for a proxy this engine did not track before: then its
// verdict starts from the Healthy condition a previous leader wrote, so
// that probes that agree with it report nothing (no status writes, no
// events, after a handover).
func (e *Engine) newState(p *crawlv1alpha1.Proxy, key cache.ObjectName, address string, interval time.Duration, now time.Time, seed bool) *proxyState {
	st := &proxyState{
		key:      key,
		uid:      string(p.UID),
		address:  address,
		interval: interval,
		due:      now,
	}
	if !e.metFleet {
		st.due = now.Add(time.Duration(e.jitter.Int64N(int64(interval))))
	}
	if seed {
		st.counters, st.reported, st.reportedAt = seedFromStatus(p, address)
	}
	return st
}

// seedFromStatus returns the verdict the proxy's status shows, as if the
// engine had reported it, or nothing when there is no Healthy condition.
func seedFromStatus(p *crawlv1alpha1.Proxy, address string) (counters, *controller.HealthVerdict, time.Time) {
	cond := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	if cond == nil || (cond.Status != metav1.ConditionTrue && cond.Status != metav1.ConditionFalse) {
		return counters{}, nil, time.Time{}
	}
	healthy := cond.Status == metav1.ConditionTrue
	c := counters{verdict: verdictUnhealthy}
	if healthy {
		c.verdict = verdictHealthy
	}
	var checkedAt time.Time
	if p.Status.LastHealthCheckTime != nil {
		checkedAt = p.Status.LastHealthCheckTime.Time
	}
	return c, &controller.HealthVerdict{
		Address:   address,
		Healthy:   healthy,
		Message:   cond.Message,
		Latency:   time.Duration(p.Status.LatencyMillis) * time.Millisecond,
		CheckedAt: checkedAt,
	}, checkedAt
}

// latencyRate is the fleet's budget of latency-only reports per second:
// perProxyHour for each probed proxy, never above rateCap (decision 122).
func latencyRate(rateCap, perProxyHour float64, probed int) rate.Limit {
	return rate.Limit(min(rateCap, float64(probed)*perProxyHour/3600))
}

// nextDue keeps the proxy's cadence (due + interval), skipping the slots a
// late probe missed rather than bunching them.
func nextDue(due time.Time, interval time.Duration, now time.Time) time.Time {
	next := due.Add(interval)
	if behind := now.Sub(next); behind >= 0 {
		next = next.Add((behind/interval + 1) * interval)
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// work runs the jobs it is handed until the channel closes.
func (e *Engine) work(ctx context.Context, jobs <-chan job) {
	for j := range jobs {
		started := e.clock.Now()
		e.metrics.ObserveScheduleDelay(started.Sub(j.due))
		r := e.runCheck(ctx, j)
		if ctx.Err() != nil {
			continue // shutting down: the failure is ours, not the proxy's
		}
		e.record(ctx, j, r, started, e.clock.Now())
	}
}

// runCheck adds the proxy's credentials to the target and probes it. When
// the job must prove the proxy closed, a successful probe is followed by
// one without credentials, which must fail: a Managed instance that serves
// anyone (a cloud-init that ignores the credentials, say) is never Ready.
func (e *Engine) runCheck(ctx context.Context, j job) Result {
	t := j.check.target
	if j.check.authSecret == "" {
		return e.probe(ctx, t)
	}
	creds, err := e.credentials(ctx, j.key.Namespace, j.check.authSecret)
	if err != nil {
		return Result{Class: ResultError, Message: err.Error()}
	}
	withAuth := t
	proxyURL := *t.Proxy
	proxyURL.User = url.UserPassword(creds.Username, creds.Password)
	withAuth.Proxy = &proxyURL
	r := e.probe(ctx, withAuth)
	if !r.OK || !j.proveClosed {
		return r
	}
	if anonymous := e.probe(ctx, t); anonymous.OK {
		return Result{Class: ResultOpen, Latency: r.Latency, Status: anonymous.Status, Message: fmt.Sprintf(
			"the instance answers without credentials too: anyone who can reach it can use it; configure it to require those of Secret %q", j.check.authSecret)}
	}
	return r
}

// credentials reads the spec.auth Secret. Its errors name the Secret and
// the key, never a value.
func (e *Engine) credentials(ctx context.Context, namespace, name string) (*proxyaccess.Credentials, error) {
	if e.secrets == nil {
		return nil, fmt.Errorf("credentials Secret %q: the engine has no Secret reader", name)
	}
	return proxyaccess.ReadCredentials(name, func(name string) (*corev1.Secret, error) { return e.secrets(ctx, namespace, name) })
}

// record applies a probe result to the proxy's state and reports the
// verdict when it is worth a status write.
func (e *Engine) record(ctx context.Context, j job, r Result, started, now time.Time) {
	e.mu.Lock()
	st := j.state
	if st.gone {
		// Pruned or replaced while the probe ran: the result is about an
		// instance or address that is no longer the proxy's.
		e.mu.Unlock()
		return
	}
	st.inFlight = false
	st.counters = observeLatency(transition(st.counters, r.OK, j.check.thresholds), r.Latency, r.OK)
	why := reportReason(st.reported, st.reportedAt, st.counters, r.Latency, r.OK, now, e.minReportInterval)
	if why == reportLatency && !e.latencyBudget.AllowN(now, 1) {
		why = "" // over the fleet's budget: a later probe reports it
	}
	// Made only when reported: most probes report nothing (decision 164).
	var v *controller.HealthVerdict
	if why != "" {
		v = &controller.HealthVerdict{
			Address:   st.address,
			Healthy:   st.counters.verdict == verdictHealthy,
			Message:   r.Message,
			CheckedAt: started,
		}
		if v.Healthy {
			v.Latency = r.Latency // a failed probe's duration is not a latency
		}
		st.reported, st.reportedAt = v, now
	}
	failures := st.counters.failures
	e.mu.Unlock()

	e.metrics.ObserveProbe(j.key, r.Class, r.Latency, started)
	e.metrics.SetConsecutiveFailures(j.key, failures)
	if why == "" {
		return
	}
	e.metrics.ObserveReport(why)
	klog.FromContext(ctx).V(2).Info("Reporting health verdict", "proxy", klog.KRef(j.key.Namespace, j.key.Name),
		"why", why, "healthy", v.Healthy, "latency", v.Latency, "message", v.Message)
	e.enqueue(j.key)
}
