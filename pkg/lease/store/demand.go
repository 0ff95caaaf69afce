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

type refusal struct {
	demandKey
	at time.Time
}

// demandState lives in the Store, guarded by its mutex.
type demandState struct {
	// waiters are the acquires sleeping in Acquire now, by a serial.
	waiters   map[uint64]demandKey
	waiterSeq uint64
	// refusals is a ring; next is where the next one goes.
	refusals [refusalRing]refusal
	next     int
	// notify is told of a new waiter or refusal (outside the lock).
	notify atomic.Pointer[func(namespace string, sel labels.Selector)]
}

// WaitDemand is the part of a pool's demand the lease store alone knows.
type WaitDemand struct {
	// Waiting acquires whose namespace and selector a member would match.
	Waiting int
	// Refused is the distinct holders refused NoneFree within RefusalWindow
	// by such an acquire, not counting those waiting now.
	Refused int
}

// Demand counts the waiting and recently refused acquires that a proxy in
// namespace with labels members would have served. An acquire matches when
// its namespace is empty or namespace, and its selector matches members.
// It fails with ErrNotLeader on a store that does not lead.
func (s *Store) Demand(namespace string, members labels.Labels) (WaitDemand, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return WaitDemand{}, ErrNotLeader
	}
	now := s.clock.Now()
	matches := func(ns string, sel labels.Selector) bool {
		return (ns == "" || ns == namespace) && (sel == nil || sel.Matches(members))
	}
	var d WaitDemand
	waitingHolders := map[string]bool{}
	for _, w := range s.demand.waiters {
		if matches(w.namespace, w.selector) {
			d.Waiting++
			waitingHolders[w.holder] = true
		}
	}
	refused := map[string]bool{}
	for i := range s.demand.refusals {
		r := &s.demand.refusals[i]
		if r.at.IsZero() || now.Sub(r.at) > RefusalWindow || waitingHolders[r.holder] || refused[r.holder] {
			continue
		}
		if matches(r.namespace, r.selector) {
			refused[r.holder] = true
		}
	}
	d.Refused = len(refused)
	return d, nil
}

// NotifyDemand registers f, called (without the store's lock) when an
// acquire starts waiting or is refused NoneFree, with its namespace and
// selector, so that a pool at zero members scales up at once. f must be
// quick: it runs on the acquiring goroutine.
func (s *Store) NotifyDemand(f func(namespace string, sel labels.Selector)) {
	s.demand.notify.Store(&f)
}

func (s *Store) notifyDemand(namespace string, sel labels.Selector) {
	if f := s.demand.notify.Load(); f != nil {
		(*f)(namespace, sel)
	}
}

// addWaiterLocked and removeWaiterLocked bracket an acquire's sleep.
func (s *Store) addWaiterLocked(namespace string, sel labels.Selector, holder string) uint64 {
	if s.demand.waiters == nil {
		s.demand.waiters = map[uint64]demandKey{}
	}
	s.demand.waiterSeq++
	s.demand.waiters[s.demand.waiterSeq] = demandKey{namespace: namespace, selector: sel, holder: holder}
	return s.demand.waiterSeq
}

func (s *Store) removeWaiterLocked(id uint64) {
	delete(s.demand.waiters, id)
}

// noteRefusalLocked remembers an acquire refused because nothing matching
// was free (not a cool-down or a recovery: more members would not help
// those). It reports whether it counted, so that the caller notifies.
func (s *Store) noteRefusalLocked(namespace string, sel labels.Selector, holder string, unavailable *UnavailableError, now time.Time) bool {
	if unavailable == nil || outcomeOf(unavailable.Reason) != AcquireNoneFree {
		return false
	}
	s.demand.refusals[s.demand.next] = refusal{at: now, demandKey: demandKey{namespace: namespace, selector: sel, holder: holder}}
	s.demand.next = (s.demand.next + 1) % refusalRing
	return true
}
