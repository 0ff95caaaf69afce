package store

import (
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Demand accounting for the ProxyPool autoscaler: which acquires wait now
// and which were recently refused because nothing matching was free, so
// that a pool can count the acquires its members would serve. The grant
// path pays nothing: a waiter registers only when it is about to sleep, and
// a refusal is written into a fixed ring without allocating.
//
// The refusals are state, changed by KindRefusal. The waiters are not:
// they are this replica's sleeping acquires, which no other replica has.

// RefusalWindow is how far back Demand counts refused acquires.
const RefusalWindow = time.Minute

// refusalRing bounds the refusals remembered (the most recent ones win).
const refusalRing = 4096

// demandKey is an acquire as demand sees it: copied, so that the request
// itself never escapes to the heap.
type demandKey struct {
	namespace string
	selector  labels.Selector
	holder    string
}

type refusedAcquire struct {
	demandKey
	at time.Time
}

// demand is the policy.
type demand struct {
	noDecision
	noMemory
	// refusals is a ring; next is where the next one goes.
	refusals [refusalRing]refusedAcquire
	next     int

	// Not state: this replica's waiters by a serial, and whom to tell of
	// a new waiter or refusal (outside the lock).
	waiters   map[uint64]demandKey
	waiterSeq uint64
	notify    atomic.Pointer[func(namespace string, sel labels.Selector)]
}

// WaitDemand is the part of a pool's demand the lease store alone knows.
type WaitDemand struct {
	// Waiting acquires whose namespace and selector a member would match.
	Waiting int
	// Refused is the distinct holders refused NoneFree within RefusalWindow
	// by such an acquire, not counting those waiting now.
	Refused int
}

// of counts the waiting and recently refused acquires at now that a proxy
// in namespace with labels members would have served.
func (d *demand) of(namespace string, members labels.Labels, now time.Time) WaitDemand {
	matches := func(ns string, sel labels.Selector) bool {
		return (ns == "" || ns == namespace) && (sel == nil || sel.Matches(members))
	}
	var out WaitDemand
	waitingHolders := map[string]bool{}
	for _, w := range d.waiters {
		if matches(w.namespace, w.selector) {
			out.Waiting++
			waitingHolders[w.holder] = true
		}
	}
	refused := map[string]bool{}
	for i := range d.refusals {
		r := &d.refusals[i]
		if r.at.IsZero() || now.Sub(r.at) > RefusalWindow || waitingHolders[r.holder] || refused[r.holder] {
			continue
		}
		if matches(r.namespace, r.selector) {
			refused[r.holder] = true
		}
	}
	out.Refused = len(refused)
	return out
}

func (d *demand) notifyDemand(namespace string, sel labels.Selector) {
	if f := d.notify.Load(); f != nil {
		(*f)(namespace, sel)
	}
}

// addWaiter and removeWaiter bracket an acquire's sleep.
func (d *demand) addWaiter(namespace string, sel labels.Selector, holder string) uint64 {
	if d.waiters == nil {
		d.waiters = map[uint64]demandKey{}
	}
	d.waiterSeq++
	d.waiters[d.waiterSeq] = demandKey{namespace: namespace, selector: sel, holder: holder}
	return d.waiterSeq
}

func (d *demand) removeWaiter(id uint64) {
	delete(d.waiters, id)
}

// refused remembers an acquire refused because nothing matching was free
// (KindRefusal).
func (d *demand) refused(r Refusal) {
	d.refusals[d.next] = refusedAcquire{at: r.at, demandKey: demandKey{namespace: r.namespace, selector: r.selector, holder: r.holder}}
	d.next = (d.next + 1) % refusalRing
}
