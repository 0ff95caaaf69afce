package store

import (
	"slices"
)

// Sticky sessions as a unit: a session's leases, and forgetting its choice
// of proxy, for the session call (DELETE /v1/sessions/{session}) that the
// gateway's callers use to move a session.

// SessionLeases returns owner's live leases acquired with session in scope
// (the acquire's namespace, "" for any), oldest grant first.
func (s *Store) SessionLeases(owner, scope, session string) []Lease {
	s.mu.Lock()
	s.advanceLocked(s.clock.Now())
	var (
		out  []Lease
		toks []token
	)
	for _, l := range s.leases {
		if l.state == stateLive && l.owner == owner && l.session == session && l.sessionScope == scope {
			view, tok := viewOfLocked(l)
			out, toks = append(out, view), append(toks, tok)
		}
	}
	s.mu.Unlock()
	for i := range out {
		out[i] = s.withID(out[i], toks[i])
	}
	sortLeases(out)
	return out
}

// ForgetSession drops owner's sticky choice of session in scope, so that
// its next acquire chooses afresh. Another identity's session of the same
// name is not touched.
func (s *Store) ForgetSession(owner, scope, session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessions[sessionKey{owner, scope, session}]; sess != nil {
		s.dropSessionLocked(sess)
	}
}

func sortLeases(ls []Lease) {
	slices.SortStableFunc(ls, func(a, b Lease) int { return a.GrantedAt.Compare(b.GrantedAt) })
}
