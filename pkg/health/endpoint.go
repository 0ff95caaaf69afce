package health

// DefaultMaxProbesPerEndpoint bounds the probes in flight through one proxy
// address. Many Proxy objects share one host:port (a proxy network's super
// proxy, where the session is in the username; a squid with many ports on one
// VM); probed all at once they become a burst that address does not accept
// (docs/decisions/0187-probes-per-endpoint-bounded.md). Ten probes of a
// second each keep 1,000 members on a 60 s interval on schedule; raise it
// (--health-max-probes-per-endpoint) for larger fleets behind one address.
const DefaultMaxProbesPerEndpoint = 10

// endpointQueues bound the probes in flight per endpoint. A job over the
// bound waits in its endpoint's queue and runs, in order, in the worker whose
// probe of that endpoint finished: the other endpoints keep their workers,
// and a probe's timeout starts when the probe does, so the wait is never
// counted against the proxy. Guarded by Engine.mu.
//
// Invariant: an endpoint with waiting jobs has limit probes in flight.
type endpointQueues struct {
	limit int
	byKey map[string]*endpointQueue
}

type endpointQueue struct {
	inFlight int
	waiting  []job
}

func newEndpointQueues(limit int) endpointQueues {
	return endpointQueues{limit: limit, byKey: map[string]*endpointQueue{}}
}

// admit counts j in flight and reports true when its endpoint has room;
// otherwise j waits its turn and admit reports false.
func (q *endpointQueues) admit(j job) bool {
	eq := q.byKey[j.state.address]
	if eq == nil {
		eq = &endpointQueue{}
		q.byKey[j.state.address] = eq
	}
	if eq.inFlight < q.limit {
		eq.inFlight++
		return true
	}
	eq.waiting = append(eq.waiting, j)
	return false
}

// finished is called when a probe of endpoint is done (or an admitted job
// could not be dispatched): it returns the endpoint's next waiting job,
// which takes over the slot, or frees the slot.
func (q *endpointQueues) finished(endpoint string) (job, bool) {
	eq := q.byKey[endpoint]
	if eq == nil {
		return job{}, false
	}
	if len(eq.waiting) > 0 {
		next := eq.waiting[0]
		eq.waiting[0] = job{}
		eq.waiting = eq.waiting[1:]
		return next, true
	}
	if eq.inFlight--; eq.inFlight == 0 {
		delete(q.byKey, endpoint)
	}
	return job{}, false
}
