package store

import (
	"container/heap"
	"fmt"
	"time"
)

// Renewing and releasing a lease, including one a previous leader
// granted, which the store re-learns from its ID.

// Renew extends a live lease acquired without an owner; see RenewAs.
func (s *Store) Renew(id string, ttl time.Duration) (Lease, error) {
	return s.RenewAs("", id, ttl)
}

// RenewAs extends a live lease of owner by ttl from now (0: its current
// TTL) and returns it with a new ID. Errors: ErrUnknownLease (404, also for
// another owner's lease), ErrRevoked (410), ErrSuperseded (409),
// ErrNotLeader, *FieldError, *HorizonError.
func (s *Store) RenewAs(owner, id string, ttl time.Duration) (Lease, error) {
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return Lease{}, err
	}
	if ttl != 0 {
		if ttl, err = s.ttlFor(ttl, "ttl"); err != nil {
			return Lease{}, err
		}
	}
	view, renewed, err := s.renewLocked(tok, ttl)
	if err != nil {
		return Lease{}, err
	}
	return s.withID(view, renewed), nil
}

// renewLocked is RenewAs under the store's lock, which it takes: the
// renewed lease and the token of its new ID.
func (s *Store) renewLocked(tok token, ttl time.Duration) (Lease, token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)
	if !s.grantingLocked(now) {
		return Lease{}, token{}, ErrNotLeader
	}
	l, err := s.findLocked(tok, now)
	if err != nil {
		return Lease{}, token{}, err
	}
	if ttl == 0 {
		// A lease re-learned from a leader with other bounds keeps to ours.
		ttl = min(max(l.ttl, s.cfg.MinTTL), s.cfg.MaxTTL)
	}
	expiresAt := now.Add(ttl)
	if err := s.checkHorizonLocked(expiresAt); err != nil {
		return Lease{}, token{}, err
	}
	l.expiresAt, l.ttl = expiresAt, ttl
	heap.Fix(&s.expiries, l.index)
	if l.session != "" {
		if sess := s.sessions[sessionKey{l.owner, l.sessionScope, l.session}]; sess != nil && sess.proxy == l.proxyKey {
			s.useSessionLocked(sess.key, sess.proxy, now)
		}
	}
	view, renewed := viewOfLocked(l)
	return view, renewed, nil
}

// Release ends a lease acquired without an owner; see ReleaseAs.
func (s *Store) Release(id string, outcome Outcome, domain string) error {
	return s.ReleaseAs("", id, outcome, domain)
}

// ReleaseAs ends a lease of owner with an outcome; OutcomeBanned starts or
// extends a cool-down of the proxy for domain (default: the lease's
// domain). Releasing a revoked lease is not an error and its ban counts,
// once: one grant counts at most one outcome, so every later release of it
// is ErrUnknownLease, like a second release of a live one.
func (s *Store) ReleaseAs(owner, id string, outcome Outcome, domain string) error {
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return err
	}
	var end string
	switch outcome {
	case OutcomeOK, "":
		end = EndReleasedOK
	case OutcomeError:
		end = EndReleasedError
	case OutcomeBanned:
		end = EndReleasedBanned
		if domain = NormalizeDomain(domain); domain == "" {
			domain = tok.domain
		}
		if domain == "" {
			return &FieldError{Field: "domain", Message: "is required when outcome is banned and the lease was acquired without a domain"}
		}
	default:
		return &FieldError{Field: "outcome", Message: fmt.Sprintf("must be one of ok, banned, error; got %q", outcome)}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)
	if !s.leading {
		return ErrNotLeader
	}
	l := s.leases[tok.key]
	switch {
	case l != nil && l.state == stateLive:
		s.releaseLiveLocked(l, end, now)
	case l != nil && (l.state == stateRevoked || l.state == stateSuperseded):
		// Already over; the ban below still tells us something, but only
		// this once.
		l.state = stateReleased
	case l == nil && s.mayRelearnLocked(tok, now):
		// A lease of the previous leader that we never met: remember that
		// it ended, so that its ID cannot be re-learned later. It was live
		// there: its instance is told, as for a lease of ours.
		s.tombstoneLocked(tok, stateReleased)
		s.endedEarlyLocked(tok.proxy, tok.proxyUID, tok.key, tok.expiresAt, end)
	default:
		return ErrUnknownLease
	}
	p := s.proxies[tok.proxy]
	if p != nil && p.info.UID != tok.proxyUID {
		p = nil // a new Proxy of the same name: not the one leased
	}
	if domain = NormalizeDomain(domain); domain == "" {
		domain = tok.domain
	}
	s.countOutcomesLocked(p, outcome, domain, 1)
	if outcome == OutcomeBanned {
		if p != nil {
			s.banLocked(p, domain, now)
			p.burn.noteBan(domain, now)
			s.dropStateLocked(tok.owner, p, domain) // the site knows this IP: start afresh
		}
	}
	return nil
}

// releaseLiveLocked ends a live lease released by its holder. The release
// is stamped no earlier than the one before it (docs/decisions/0163-release-stamped-no-earlier-than-release.md), so that the
// selection order is the order the releases were made even when a clock
// reading lags the last one: stamped as it is, it would sort before them,
// and its insert would walk back past each of them.
func (s *Store) releaseLiveLocked(l *lease, end string, now time.Time) {
	if now.Before(s.lastRelease) {
		now = s.lastRelease
	}
	s.lastRelease = now
	if l.key.epoch == s.epoch {
		s.endLocked(l, end, now, stateLive)
	} else {
		// Re-learned from a previous leader: its ID must not be re-learned again.
		s.endLocked(l, end, now, stateReleased)
	}
}

// mayRelearnLocked: an ID this store does not know is trusted only while
// recovering, only from an earlier term, and only until its expiry.
func (s *Store) mayRelearnLocked(tok token, now time.Time) bool {
	return s.recovering && tok.key.epoch < s.epoch && now.Before(tok.expiresAt)
}

// findLocked returns the live lease tok names, re-learning it if it was
// granted by a previous leader.
func (s *Store) findLocked(tok token, now time.Time) (*lease, error) {
	if l := s.leases[tok.key]; l != nil {
		switch l.state {
		case stateLive:
			return l, nil
		case stateRevoked:
			return nil, ErrRevoked
		case stateSuperseded:
			return nil, ErrSuperseded
		default:
			return nil, ErrUnknownLease
		}
	}
	if !s.mayRelearnLocked(tok, now) {
		return nil, ErrUnknownLease
	}
	p := s.proxies[tok.proxy]
	if p == nil || !p.ready() || p.info.UID != tok.proxyUID || p.urlHash != tok.urlHash ||
		!p.info.ReadySince.Equal(tok.readySince) || int(tok.slot) >= p.capacity() {
		s.tombstoneLocked(tok, stateRevoked)
		return nil, ErrRevoked
	}
	if o := p.occupant(tok.slot); o != nil {
		// One slot held one lease at a time on the previous leader: the
		// later grant proves that the earlier lease had ended there.
		if tok.key.less(o.key) {
			s.tombstoneLocked(tok, stateSuperseded)
			return nil, ErrSuperseded
		}
		s.endLocked(o, EndSuperseded, now, stateSuperseded)
	}
	l := &lease{
		key:          tok.key,
		proxy:        p,
		proxyKey:     tok.proxy,
		proxyUID:     tok.proxyUID,
		slot:         tok.slot,
		holder:       tok.holder,
		owner:        tok.owner,
		session:      tok.session,
		sessionScope: tok.sessionScope,
		domain:       tok.domain,
		grantedAt:    tok.grantedAt,
		expiresAt:    tok.expiresAt,
		ttl:          tok.ttl,
		urlHash:      tok.urlHash,
		readySince:   tok.readySince,
	}
	s.installLocked(l)
	s.seedTierLocked(l, now)
	// The session's lease is known again, so that its next acquire joins
	// it (unless the session has chosen anew on this leader already).
	if key := (sessionKey{l.owner, l.sessionScope, l.session}); l.session != "" && s.sessions[key] == nil {
		s.useSessionLocked(key, l.proxyKey, now)
	}
	return l, nil
}
