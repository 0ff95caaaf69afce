package store

import (
	"container/heap"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The store's bookkeeping under its lock: installing, ending, revoking
// and expiring leases, bans, wake-ups of waiters, and the selection
// orders and expiry heap that keep them.

// installLocked makes l live on its proxy's slot.
func (s *Store) installLocked(l *lease) {
	l.proxy.occupy(l)
	s.relistLocked(l.proxy, false)
	s.leases[l.key] = l
	heap.Push(&s.expiries, l)
	s.chargeLocked(l)
	s.live++
	if l.owner != "" {
		s.owned[l.owner]++
	}
	s.metrics.SetActiveLeases(s.live)
}

// tombstoneLocked records a lease this store never held live, so that its
// ID is answered consistently until it expires.
func (s *Store) tombstoneLocked(tok token, state leaseState) {
	l := &lease{key: tok.key, state: state, proxyKey: tok.proxy, proxyUID: tok.proxyUID, slot: tok.slot, expiresAt: tok.expiresAt}
	s.leases[l.key] = l
	heap.Push(&s.expiries, l)
}

// endLocked ends a live lease before its expiry; tombstone stateLive
// means no tombstone.
func (s *Store) endLocked(l *lease, end string, now time.Time, tombstone leaseState) {
	s.freeLocked(l, end, now)
	s.endedEarlyLocked(l.proxyKey, l.proxyUID, l.key, l.expiresAt, end)
	if tombstone == stateLive {
		heap.Remove(&s.expiries, l.index)
		delete(s.leases, l.key)
		return
	}
	l.state = tombstone
}

// endedEarlyLocked tells Config.OnLeaseEnded of a lease that ended before
// its expiry.
func (s *Store) endedEarlyLocked(proxy ObjectName, uid types.UID, key leaseKey, expiresAt time.Time, end string) {
	if s.cfg.OnLeaseEnded != nil {
		s.cfg.OnLeaseEnded(EndedLease{Proxy: proxy, ProxyUID: uid, Ref: key.ref(), ExpiresAt: expiresAt, End: end})
	}
}

// freeLocked takes a live lease off its proxy.
func (s *Store) freeLocked(l *lease, end string, at time.Time) {
	p := l.proxy
	p.slots[l.slot] = nil
	p.held--
	l.proxy = nil
	s.unchargeLocked(l)
	s.live--
	if l.owner != "" {
		if s.owned[l.owner]--; s.owned[l.owner] <= 0 {
			delete(s.owned, l.owner)
		}
	}
	s.metrics.SetActiveLeases(s.live)
	s.metrics.ObserveLeaseEnd(end, at.Sub(l.grantedAt))
	released := end != EndRevoked && end != EndSuperseded
	if released {
		p.lastReleased = at
	}
	s.relistLocked(p, released)
	s.broadcastLocked()
}

// revokeLocked revokes the leases of p in slots from keep on (0: all).
func (s *Store) revokeLocked(p *proxyState, keep int, now time.Time) {
	for i := keep; i < len(p.slots); i++ {
		if l := p.slots[i]; l != nil {
			s.endLocked(l, EndRevoked, now, stateRevoked)
		}
	}
	if keep < len(p.slots) {
		p.slots = p.slots[:keep]
	}
}

func (s *Store) banLocked(p *proxyState, domain string, now time.Time) {
	if p.cooldowns == nil {
		p.cooldowns = map[string]*cooldown{}
	}
	c := p.cooldowns[domain]
	if c == nil {
		s.makeRoomForCooldownLocked()
	}
	wasInForce := c != nil && c.inForce
	c = ban(c, cooldownKey{proxy: p.info.Key, domain: domain}, now, s.cfg.CooldownBase, s.cfg.CooldownMax, s.cfg.CooldownDecay)
	p.cooldowns[domain] = c
	if c.index < 0 {
		heap.Push(&s.cooldowns, c)
		s.setStateEntries(StateCooldowns, len(s.cooldowns))
	} else {
		heap.Fix(&s.cooldowns, c.index)
	}
	if !wasInForce {
		p.cooling++
		s.inForce++
		s.metrics.SetCooldowns(s.inForce)
	}
}

func (s *Store) forgetCooldownsLocked(p *proxyState) {
	for _, c := range p.cooldowns {
		if c.inForce {
			s.inForce--
		}
		heap.Remove(&s.cooldowns, c.index)
	}
	p.cooldowns, p.cooling = nil, 0
	s.metrics.SetCooldowns(s.inForce)
	s.setStateEntries(StateCooldowns, len(s.cooldowns))
}

// advanceLocked applies what time has done up to now.
func (s *Store) advanceLocked(now time.Time) {
	for len(s.expiries) > 0 && !now.Before(s.expiries[0].expiresAt) {
		l := heap.Pop(&s.expiries).(*lease)
		delete(s.leases, l.key)
		if l.state == stateLive {
			s.freeLocked(l, EndExpired, l.expiresAt)
		}
	}
	for len(s.cooldowns) > 0 && !now.Before(s.cooldowns[0].nextEvent()) {
		c := s.cooldowns[0]
		if !c.inForce {
			heap.Pop(&s.cooldowns)
			delete(s.proxies[c.key.proxy].cooldowns, c.key.domain)
			s.setStateEntries(StateCooldowns, len(s.cooldowns))
			continue
		}
		c.inForce = false
		heap.Fix(&s.cooldowns, 0)
		s.proxies[c.key.proxy].cooling--
		s.inForce--
		s.metrics.SetCooldowns(s.inForce)
		s.broadcastLocked()
	}
	if s.recovering && !now.Before(s.recoverUntil) {
		s.recovering = false
		s.metrics.SetRecovering(false)
		s.broadcastLocked()
	}
	s.expireSessionsLocked(now)
}

// nextEventLocked is the next time advanceLocked has something to do that
// may free capacity, zero if nothing is scheduled.
func (s *Store) nextEventLocked() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if len(s.expiries) > 0 {
		earlier(s.expiries[0].expiresAt)
	}
	if len(s.cooldowns) > 0 {
		earlier(s.cooldowns[0].nextEvent())
	}
	if s.recovering {
		earlier(s.recoverUntil)
	}
	return next
}

func (s *Store) broadcastLocked() {
	if s.waiting > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// relistLocked keeps p in the selection orders exactly while it is Ready
// with a free slot; moved: its place may have changed (a release, a new
// latency) and is found again.
func (s *Store) relistLocked(p *proxyState, moved bool) {
	want := p.isReady && p.free()
	switch {
	case want && !p.listed():
		s.enterOrderLocked(p)
	case !want && p.listed():
		s.leaveOrderLocked(p)
	case want && moved:
		s.leaveOrderLocked(p)
		s.enterOrderLocked(p)
	}
}

func (s *Store) enterOrderLocked(p *proxyState) {
	s.order.insert(p)
	ns := s.byNamespace[p.info.Key.Namespace]
	if ns == nil {
		ns = &selectionOrder{byNamespace: true}
		s.byNamespace[p.info.Key.Namespace] = ns
	}
	ns.insert(p)
}

// leaveOrderLocked takes p out of the orders. A namespace's order, even
// empty, stays: its proxies come back at their next release, and a new
// order for each would be an allocation a grant.
func (s *Store) leaveOrderLocked(p *proxyState) {
	s.order.remove(p)
	s.byNamespace[p.info.Key.Namespace].remove(p)
}

// leaseHeap orders leases (live and tombstones) by expiry.
type leaseHeap []*lease

func (h leaseHeap) Len() int { return len(h) }

func (h leaseHeap) Less(i, j int) bool { return h[i].expiresAt.Before(h[j].expiresAt) }

func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}
