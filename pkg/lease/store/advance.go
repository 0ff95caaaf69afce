package store

import (
	"time"
)

// What time does to the store, decided by the one that leads: leases and
// their tombstones reach their expiry, cool-downs lapse and are forgotten,
// the recovery after a leader change ends, sessions go idle. Each is an
// effect of its own, so that a store that follows never reads a clock for
// them: it applies the leader's.

// advance applies what time has done up to now; the caller holds the lock.
func (s *Store) advance(now time.Time) {
	st := s.st
	for len(st.expiries) > 0 && !now.Before(st.expiries[0].expiresAt) {
		s.commit(Expire{key: st.expiries[0].key})
	}
	for e := st.cooldowns.due(now); e != nil; e = st.cooldowns.due(now) {
		s.commit(e)
	}
	if st.term.recovering && !now.Before(st.term.recoverUntil) {
		s.commit(Recovered{})
	}
	for e := st.sessions.due(now); e != nil; e = st.sessions.due(now) {
		s.commit(e)
	}
}

// nextEvent is the next time advance has something to do that may free
// capacity (an expiry, a cool-down's end, the recovery's end), zero if
// nothing is scheduled.
func nextEvent(expiries leaseHeap, cooldowns *cooldowns, t *term) time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if len(expiries) > 0 {
		earlier(expiries[0].expiresAt)
	}
	earlier(cooldowns.next())
	if t.recovering {
		earlier(t.recoverUntil)
	}
	return next
}
