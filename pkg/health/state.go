package health

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

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
	reported   *Verdict
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
	// than the 0.6% of the engine's CPU they save is worth (docs/decisions/0164-engine-own-work-probe-measured-alone.md).
	check check
	due   time.Time
	// proveClosed: probe without credentials too, because the proxy is
	// not healthy yet and its check says it must refuse anonymous requests.
	proveClosed bool
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
func seedFromStatus(p *crawlv1alpha1.Proxy, address string) (counters, *Verdict, time.Time) {
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
	v := &Verdict{
		Address:     address,
		Healthy:     healthy,
		Message:     cond.Message,
		Latency:     time.Duration(p.Status.LatencyMillis) * time.Millisecond,
		ExitIP:      p.Status.ExitIP,
		ExitCountry: p.Status.ExitCountry,
		CheckedAt:   checkedAt,
	}
	// The LeaseBound condition's reason is the check, so a new leader's
	// first probe writes nothing when it finds the same.
	if bound := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound); bound != nil && slices.Contains(LeaseChecks, LeaseCheck(bound.Reason)) {
		v.Lease = LeaseCheck(bound.Reason)
	}
	return c, v, checkedAt
}
