package store

import (
	"container/heap"
	"time"
)

// The store's state that callers create at will, sticky sessions and
// (proxy, domain) cool-downs, is bounded by Config.MaxSessions and
// Config.MaxCooldowns, so that a crawler inventing sessions and domains
// cannot grow the leader without limit.
//
//   - Sessions are kept least recently used last; a new session beyond the
//     cap evicts the least recently used one (a session only makes a
//     choice sticky, so forgetting one costs stickiness, nothing else).
//     Idle sessions expire from the same end.
//   - A new cool-down entry beyond the cap evicts the entry whose next
//     event is soonest (the one that would end or be forgotten first),
//     which is the cheapest to lose: usually a remembered strike, at worst
//     the cool-down closest to its end.

// useSessionLocked records that key chose proxy at now.
func (s *Store) useSessionLocked(key sessionKey, proxy ObjectName, now time.Time) {
	if sess := s.sessions[key]; sess != nil {
		sess.proxy, sess.lastUsed = proxy, now
		s.sessionLRU.MoveToFront(sess.elem)
		return
	}
	for len(s.sessions) >= s.cfg.MaxSessions {
		s.dropSessionLocked(s.sessionLRU.Back().Value.(*session))
		s.observeEviction(StateSessions)
	}
	sess := &session{key: key, proxy: proxy, lastUsed: now}
	sess.elem = s.sessionLRU.PushFront(sess)
	s.sessions[key] = sess
	s.setStateEntries(StateSessions, len(s.sessions))
}

// expireSessionsLocked forgets the sessions unused for longer than SessionIdle.
func (s *Store) expireSessionsLocked(now time.Time) {
	n := len(s.sessions)
	for e := s.sessionLRU.Back(); e != nil; e = s.sessionLRU.Back() {
		sess := e.Value.(*session)
		if now.Sub(sess.lastUsed) <= s.cfg.SessionIdle {
			break
		}
		s.dropSessionLocked(sess)
	}
	if len(s.sessions) != n {
		s.setStateEntries(StateSessions, len(s.sessions))
	}
}

func (s *Store) dropSessionLocked(sess *session) {
	s.sessionLRU.Remove(sess.elem)
	delete(s.sessions, sess.key)
}

// makeRoomForCooldownLocked evicts entries until a new one fits the cap.
func (s *Store) makeRoomForCooldownLocked() {
	for len(s.cooldowns) >= s.cfg.MaxCooldowns {
		c := heap.Pop(&s.cooldowns).(*cooldown)
		p := s.proxies[c.key.proxy]
		delete(p.cooldowns, c.key.domain)
		if c.inForce {
			p.cooling--
			s.inForce--
			s.metrics.SetCooldowns(s.inForce)
			s.broadcastLocked()
		}
		s.observeEviction(StateCooldowns)
	}
}

func (s *Store) setStateEntries(kind string, n int) {
	if m, ok := s.metrics.(StateMetrics); ok {
		m.SetStateEntries(kind, n)
	}
}

func (s *Store) observeEviction(kind string) {
	if m, ok := s.metrics.(StateMetrics); ok {
		m.ObserveStateEviction(kind)
	}
}
