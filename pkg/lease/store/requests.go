package store

import "time"

// Request IDs: an acquire may name itself (AcquireRequest.RequestID), so
// that sending it again gets the lease it got rather than a second one.
// That is what a client does when an answer was lost on the way: a replica
// forwarding to a leader that crashed after deciding, a gateway whose
// connection broke. The policy remembers, per identity and request ID, the
// live lease the acquire got; an entry lives exactly as long as its lease,
// so the live leases bound them.

// MaxRequestIDLen bounds a request ID.
const MaxRequestIDLen = 128

type requestKey struct {
	owner, id string
}

// requests is the policy.
type requests struct {
	noDecision
	byID map[requestKey]leaseKey
}

// leaseOf is the live lease the acquire owner named id got, nil for none.
func (r *requests) leaseOf(owner, id string, leases map[leaseKey]*lease) *lease {
	if id == "" {
		return nil
	}
	key, ok := r.byID[requestKey{owner, id}]
	if !ok {
		return nil
	}
	if l := leases[key]; l != nil && l.state == stateLive {
		return l
	}
	return nil
}

func (r *requests) installed(l *lease, how install) {
	if how.grant && l.requestID != "" {
		r.byID[requestKey{l.owner, l.requestID}] = l.key
	}
}

func (r *requests) ended(l *lease) {
	if l.requestID != "" {
		delete(r.byID, requestKey{l.owner, l.requestID})
	}
}

func (*requests) forget(ObjectName, bool) {}
func (r *requests) termEnded()            { clear(r.byID) }
func (*requests) promoted(time.Duration)  {}
