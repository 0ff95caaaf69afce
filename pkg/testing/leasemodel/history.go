// Package leasemodel checks a history of lease API calls, recorded from the
// real operator replicas under faults (pkg/testsuites/replication), against
// a model of what the lease store promises, with porcupine
// (github.com/anishathalye/porcupine): a checker of linearizability, as
// etcd's robustness suite and Jepsen use one.
//
// The model is of safety only: a refusal is always allowed (a replica may
// have no leader to ask), and a grant is checked against what must still
// hold when it was made:
//
//   - exclusive leases: no proxy is granted while maxLeases other leases
//     on it must still live (a lease acknowledged at call time c with ttl
//     lives at least until c+ttl unless released), and a renewal or a
//     release never finds such a lease gone;
//   - cool-downs: no proxy is granted for a domain inside a cool-down that
//     a banned release started (at least the base cool-down from its call);
//   - a CrawlPolicy budget: no grant beyond maxConcurrent, and none sooner
//     than minInterval after the previous grant;
//   - session state: a grant carries what the last acknowledged put of the
//     same identity kept for that proxy and domain;
//   - sticky sessions: a session's acquire while its lease must still live
//     gets that lease.
//
// Times are the recording process's monotonic clock, so the model needs no
// clock of the replicas': on one machine their clocks are the recorder's,
// and the documented clock skew between replicas is zero here.
//
// It is used only by tests.
package leasemodel

import (
	"fmt"
	"time"
)

// Kind is what a call did.
type Kind uint8

const (
	Acquire Kind = iota + 1
	Renew
	Release
	PutState
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Renew:
		return "renew"
	case Release:
		return "release"
	case PutState:
		return "putState"
	}
	return "unknown"
}

// Result is what the caller learnt of a call.
type Result uint8

const (
	// Ack: the call succeeded (2xx).
	Ack Result = iota + 1
	// Refused: an answer that says the call changed nothing (an acquire's
	// 503 or 429, any 400).
	Refused
	// Gone: the lease is not live (404, 409 or 410). A release may have
	// been applied by an earlier sending of its own, whose answer was lost.
	Gone
	// Unknown: no answer, or one that does not say whether the call took
	// effect (a transport error, a timeout, a 503 after forwarding). Its
	// effect, if any, may come at any time after its call: the checker
	// takes its return to be the history's end.
	Unknown
)

func (r Result) String() string {
	switch r {
	case Ack:
		return "ack"
	case Refused:
		return "refused"
	case Gone:
		return "gone"
	case Unknown:
		return "unknown"
	}
	return "?"
}

// LeaseRef names one lease across its IDs (a renewal changes the ID, a
// session's join returns the same lease): its proxy and its grant time.
type LeaseRef struct {
	Proxy     string
	GrantedAt time.Time
}

func (r LeaseRef) String() string {
	return fmt.Sprintf("%s@%s", r.Proxy, r.GrantedAt.Format("15:04:05.000000000"))
}

// Op is one call and what came of it. Call and Return are offsets of the
// recorder's monotonic clock from the history's start.
type Op struct {
	Client       int
	Kind         Kind
	Call, Return time.Duration
	Result       Result
	// Identity is the caller's: a lease, its state and a session are the
	// identity's.
	Identity string
	// Domain and Session are the acquire's (for the other calls, those of
	// the lease's acquire).
	Domain, Session string
	// TTL is what the lease was granted or renewed for (the answer's), or
	// asked for when there is no answer.
	TTL time.Duration
	// Lease is the lease granted (an acknowledged acquire) or called on.
	Lease LeaseRef
	// Outcome and BanDomain are a release's (BanDomain: the domain a
	// banned release cools the proxy down for).
	Outcome, BanDomain string
	// State is what a put kept, or what a grant carried back.
	State string
}

func (o Op) String() string {
	s := fmt.Sprintf("c%d %s %s [%v, %v] %s", o.Client, o.Identity, o.Kind, o.Call.Round(time.Microsecond), o.Return.Round(time.Microsecond), o.Result)
	switch o.Kind {
	case Acquire:
		s += fmt.Sprintf(" domain=%q session=%q ttl=%v", o.Domain, o.Session, o.TTL)
		if o.Result == Ack {
			s += fmt.Sprintf(" -> %v state=%q", o.Lease, o.State)
		}
	case Renew:
		s += fmt.Sprintf(" %v ttl=%v", o.Lease, o.TTL)
	case Release:
		s += fmt.Sprintf(" %v outcome=%s ban=%q", o.Lease, o.Outcome, o.BanDomain)
	case PutState:
		s += fmt.Sprintf(" %v state=%q", o.Lease, o.State)
	}
	return s
}

// granted: an acknowledged acquire.
func (o *Op) granted() bool { return o.Kind == Acquire && o.Result == Ack }

// banned: a release that may have started a cool-down.
func (o *Op) banned() bool {
	return o.Kind == Release && o.Outcome == "banned" && o.BanDomain != "" && o.Result != Refused
}

// latest is the latest the call may have taken effect: its return, or
// never for an unknown result.
func (o *Op) latest() time.Duration {
	if o.Result == Unknown {
		return forever
	}
	return o.Return
}

// forever is the return of an operation whose answer was lost.
const forever = time.Duration(1<<63 - 1)
