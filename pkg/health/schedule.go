package health

import (
	"context"
	"slices"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// passTally is what one scheduling pass counted: the proxies whose
// metrics go, and the fleet by verdict.
type passTally struct {
	forget                      []cache.ObjectName
	healthy, unhealthy, unknown int
}

func (t *passTally) count(v verdict) {
	switch v {
	case verdictHealthy:
		t.healthy++
	case verdictUnhealthy:
		t.unhealthy++
	default:
		t.unknown++
	}
}

// schedule is one tick: it brings the per-proxy states in line with the
// cache and dispatches the due probes.
func (e *Engine) schedule(ctx context.Context, now time.Time, dispatch func(job) bool) {
	objs := e.proxies.List()
	var tally passTally
	e.mu.Lock()
	e.pass++
	due := e.collectDueLocked(ctx, objs, now, &tally)
	skipped := e.dispatchDueLocked(due, now, dispatch)
	e.metFleet = true
	e.latencyBudget.SetLimitAt(now, latencyRate(e.latencyRateCap, e.latencyPerProxyHour, tally.healthy+tally.unhealthy+tally.unknown))
	e.mu.Unlock()

	for _, key := range tally.forget {
		e.metrics.ForgetProxy(key)
	}
	for range skipped {
		e.metrics.ProbeDispatchSkipped()
	}
	if skipped > 0 {
		klog.FromContext(ctx).V(4).Info("Probe queue full; due probes wait for the next tick", "skipped", skipped)
	}
	e.metrics.SetProxiesByVerdict(tally.healthy, tally.unhealthy, tally.unknown)
}

// collectDueLocked meets every cached proxy, prunes the states the pass did
// not meet, and returns the due probes (in e.due's backing array).
func (e *Engine) collectDueLocked(ctx context.Context, objs []any, now time.Time, tally *passTally) []job {
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
			// same pointer means nothing below can differ (docs/decisions/0157-scheduling-pass-looks-again-only-at.md).
			key := cache.MetaObjectToName(p)
			var replaced bool
			if st, replaced = e.meet(ctx, p, key, e.states[key], now); replaced {
				tally.forget = append(tally.forget, key)
			}
			if st == nil {
				continue // its state, if any, is pruned below
			}
		}
		if st.pass != e.pass {
			st.pass = e.pass
			met++
		}
		tally.count(st.counters.verdict)

		if !st.inFlight && !now.Before(st.due) {
			c := checkFor(p, st.address, e.rootCAs, e.providers)
			// Only on the way to healthy: an instance is proved closed
			// before its first Ready (a replaced one starts over), and a
			// healthy fleet pays for one probe each, not two.
			prove := c.mustRefuseAnonymous && st.counters.verdict != verdictHealthy
			due = append(due, job{key: st.key, state: st, check: c, due: st.due, proveClosed: prove})
		}
	}
	// Every state met is marked, so in a steady fleet there is none to
	// look for: a pass costs no walk of the states (docs/decisions/0157-scheduling-pass-looks-again-only-at.md).
	if met != len(e.states) {
		for key, st := range e.states {
			if st.pass != e.pass {
				e.dropLocked(st)
				tally.forget = append(tally.forget, key)
			}
		}
	}
	return due
}

// dispatchDueLocked hands the due probes to the workers, most overdue first,
// and returns how many the queue could not take. It keeps due's backing
// array for the next pass, without the states it points at.
func (e *Engine) dispatchDueLocked(due []job, now time.Time, dispatch func(job) bool) (skipped int) {
	// The most overdue first: when the pool cannot take them all, those
	// left waiting are the ones that waited least.
	slices.SortFunc(due, func(a, b job) int { return a.due.Compare(b.due) })
	for i, j := range due {
		// A job over its endpoint's bound is taken all the same: it runs
		// when a probe of its endpoint finishes.
		if e.endpoints.admit(j) && !dispatch(j) {
			e.endpoints.finished(j.state.address) // no job waits: the bound was not reached
			skipped = len(due) - i
			break
		}
		j.state.inFlight = true
		j.state.due = nextDue(j.due, j.check.interval, now)
	}
	clear(due)
	e.due = due[:0]
	return skipped
}

// latencyRate is the fleet's budget of latency-only reports per second:
// perProxyHour for each probed proxy, never above rateCap (docs/decisions/0122-latency-budget-scales-fleet-at-most.md).
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
