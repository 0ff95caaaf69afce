package store

import (
	"fmt"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
)

// What a holder does with its lease after the grant: renew it (including
// one a previous leader granted, which the store re-learns from its ID),
// release it, report what it moved, keep session state under it, forget
// its session's choice.

// RenewAs extends a live lease of owner ("" for one acquired without an
// owner, by an in-process caller) by ttl from now (0: its current TTL) and
// returns it with a new ID; r is what the holder reports with it, counted
// as part of the renewal, so only if it succeeds (see Report). Errors:
// ErrUnknownLease (404, also for another owner's lease), ErrRevoked (410),
// ErrSuperseded (409), ErrNotLeader, *FieldError, *HorizonError.
func (s *Store) RenewAs(owner, id string, ttl time.Duration, r Report) (Lease, error) {
	if err := r.validate(); err != nil {
		return Lease{}, err
	}
	tok, err := s.signer.decodeOwned(owner, id)
	if err != nil {
		return Lease{}, err
	}
	if ttl != 0 {
		if ttl, err = s.cfg.ttlFor(ttl, "ttl"); err != nil {
			return Lease{}, err
		}
	}
	var view Lease
	p, ok := s.locked(func(now time.Time) {
		var l *lease
		if err = s.st.term.grants(s.cfg, now); err == nil {
			l, err = s.find(tok, now)
		}
		if err != nil {
			return
		}
		if ttl == 0 {
			// A lease re-learned from a leader with other bounds keeps to ours.
			ttl = min(max(l.ttl, s.cfg.MinTTL), s.cfg.MaxTTL)
		}
		expiresAt := now.Add(ttl)
		if err = s.st.term.allows(expiresAt); err == nil {
			err = r.within(l, now)
		}
		if err != nil {
			return
		}
		if !expiresAt.Equal(l.expiresAt) || ttl != l.ttl || l.session != "" {
			s.commit(Renew{key: l.key, expiresAt: expiresAt, ttl: ttl, at: now})
		}
		if r != (Report{}) {
			s.commit(OutcomeCount{proxy: l.proxyKey, uid: l.proxyUID, lease: l.key, outcome: OutcomeOK, domain: l.domain,
				n: r.OKRequests, bytes: r.TransferredBytes, at: now})
		}
		view, tok = viewOf(l)
	})
	if err == nil {
		err = settle(p, ok)
	}
	if err != nil {
		return Lease{}, err
	}
	return s.signer.withID(view, tok), nil
}

// ReleaseAs ends a lease of owner with an outcome; OutcomeBanned starts or
// extends a cool-down of the proxy for domain (default: the lease's
// domain). Releasing a revoked lease is not an error and its ban counts,
// once: one grant counts at most one outcome, so every later release of it
// is ErrUnknownLease, like a second release of a live one. r is what the
// holder reports with the release, counted only for a lease that was
// live (see Report).
func (s *Store) ReleaseAs(owner, id string, outcome Outcome, domain string, r Report) error {
	if err := r.validate(); err != nil {
		return err
	}
	tok, err := s.signer.decodeOwned(owner, id)
	if err != nil {
		return err
	}
	end, err := endOf(outcome)
	if err != nil {
		return err
	}
	if domain = hostrule.NormalizeDomain(domain); domain == "" {
		domain = tok.domain
	}
	if outcome == OutcomeBanned && domain == "" {
		return &FieldError{Field: "domain", Message: "is required when outcome is banned and the lease was acquired without a domain"}
	}
	p, ok := s.locked(func(now time.Time) {
		if !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		switch l := s.st.leases[tok.key]; {
		case l != nil && l.state == stateLive:
			if err = r.within(l, now); err != nil {
				return
			}
			if r != (Report{}) {
				s.commit(OutcomeCount{proxy: l.proxyKey, uid: l.proxyUID, lease: l.key, outcome: OutcomeOK, domain: l.domain,
					n: r.OKRequests, bytes: r.TransferredBytes, at: now})
			}
			// Stamped no earlier than the release before it
			// (docs/decisions/0163-release-stamped-no-earlier-than-release.md),
			// so that the selection order is the order the releases were
			// made even when a clock reading lags the last one.
			tombstone := stateLive
			if l.key.epoch != s.st.term.epoch {
				tombstone = stateReleased // re-learned: its ID must not be re-learned again
			}
			s.commit(End{key: l.key, how: end, at: later(now, s.st.lastRelease), tombstone: tombstone})
		case l != nil && (l.state == stateRevoked || l.state == stateSuperseded):
			// Already over; the ban below still tells us something, but
			// only this once.
			s.commit(Tombstone{lease: tok, state: stateReleased})
		case l == nil && s.st.term.mayRelearn(tok, now):
			// A lease of the previous leader that we never met: remember
			// that it ended, so that its ID cannot be re-learned later. It
			// was live there: its instance is told, as for a lease of ours.
			s.commit(Tombstone{lease: tok, state: stateReleased})
			if s.cfg.OnLeaseEnded != nil {
				s.ended = append(s.ended, EndedLease{Proxy: tok.proxy, ProxyUID: tok.proxyUID, Ref: tok.key.ref(), ExpiresAt: tok.expiresAt, End: end})
			}
		default:
			err = ErrUnknownLease
			return
		}
		s.commit(OutcomeCount{proxy: tok.proxy, uid: tok.proxyUID, outcome: outcome, domain: domain, n: 1, at: now})
		if outcome == OutcomeBanned {
			s.commit(Ban{proxy: tok.proxy, uid: tok.proxyUID, domain: domain, owner: tok.owner, at: now})
		}
	})
	if err == nil {
		err = settle(p, ok)
	}
	return err
}

// endOf is how a release with outcome ends its lease.
func endOf(outcome Outcome) (string, error) {
	switch outcome {
	case OutcomeOK, "":
		return EndReleasedOK, nil
	case OutcomeError:
		return EndReleasedError, nil
	case OutcomeBanned:
		return EndReleasedBanned, nil
	}
	return "", &FieldError{Field: "outcome", Message: fmt.Sprintf("must be one of ok, banned, error; got %q", outcome)}
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// find returns the live lease tok names, re-learning it if it was granted
// by a previous leader.
func (s *Store) find(tok token, now time.Time) (*lease, error) {
	st := s.st
	if l := st.leases[tok.key]; l != nil {
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
	if !st.term.mayRelearn(tok, now) {
		return nil, ErrUnknownLease
	}
	p := st.proxies[tok.proxy]
	if p == nil || !p.ready() || p.info.UID != tok.proxyUID || p.urlHash != tok.urlHash ||
		!p.info.ReadySince.Equal(tok.readySince) || int(tok.slot) >= p.capacity() {
		s.commit(Tombstone{lease: tok, state: stateRevoked})
		return nil, ErrRevoked
	}
	if o := p.occupant(tok.slot); o != nil {
		// One slot held one lease at a time on the previous leader: the
		// later grant proves that the earlier lease had ended there.
		if tok.key.less(o.key) {
			s.commit(Tombstone{lease: tok, state: stateSuperseded})
			return nil, ErrSuperseded
		}
		s.commit(End{key: o.key, how: EndSuperseded, at: now, tombstone: stateSuperseded})
	}
	s.commit(Relearn{lease: tok, at: now})
	return st.leases[tok.key], nil
}

// The bounds of reports: one report tells what happened since the
// holder's last one, never a running total; all of a lease's reports
// together are bounded by what its life allows: MaxOKRequestsPerSecond
// and MaxBytesPerSecond for every second since its grant, and one second
// more. A report beyond either is refused whole with the renewal or
// release that carries it (docs/api.md).
const (
	MaxTransferredReport   = 1 << 40 // bytes: 1 TiB
	MaxOKRequestsReport    = 1 << 20
	MaxOKRequestsPerSecond = 10_000
	MaxBytesPerSecond      = 10 << 30 // 10 GiB/s: above what one proxy moves
)

// Report is what a holder tells of a lease it keeps, with a renewal or the
// release: the requests that went well on it and the bytes moved, since
// its last report. It counts towards the leased proxy's pool's usage
// (status.usage.transferredGiB, priced by spec.cost.perGiB) and the
// requests as ok outcomes for the pool and for the rule of the lease's
// domain, as releases count, so that a sticky session counts each request
// (its lease counts an outcome only when a ban or an error ends it). It is
// counted as part of the renewal or release, so only when that succeeds
// and only for a live lease: a report on an ended lease counts nothing.
type Report struct {
	OKRequests, TransferredBytes int64
}

// validate checks one report's own bounds.
func (r Report) validate() error {
	if r.TransferredBytes < 0 || r.TransferredBytes > MaxTransferredReport {
		return &FieldError{Field: "transferredBytes", Message: fmt.Sprintf("must be between 0 and %d (the bytes moved since the last report); got %d", int64(MaxTransferredReport), r.TransferredBytes)}
	}
	if r.OKRequests < 0 || r.OKRequests > MaxOKRequestsReport {
		return &FieldError{Field: "okRequests", Message: fmt.Sprintf("must be between 0 and %d (the requests since the last report); got %d", int64(MaxOKRequestsReport), r.OKRequests)}
	}
	return nil
}

// within checks that l's reports with r stay within what its life allows
// at now.
func (r Report) within(l *lease, now time.Time) error {
	if r == (Report{}) {
		return nil
	}
	life := now.Sub(l.grantedAt) + time.Second
	maxOK, maxBytes := int64(life.Seconds()*MaxOKRequestsPerSecond), int64(life.Seconds()*MaxBytesPerSecond)
	if l.reportedOK+r.OKRequests > maxOK {
		return &FieldError{Field: "okRequests", Message: fmt.Sprintf("the lease's reports would come to %d requests in the %v since its grant; at most %d a second are counted", l.reportedOK+r.OKRequests, life.Round(time.Second), MaxOKRequestsPerSecond)}
	}
	if l.reportedBytes+r.TransferredBytes > maxBytes {
		return &FieldError{Field: "transferredBytes", Message: fmt.Sprintf("the lease's reports would come to %d bytes in the %v since its grant; at most %d a second are counted", l.reportedBytes+r.TransferredBytes, life.Round(time.Second), int64(MaxBytesPerSecond))}
	}
	return nil
}

// PutStateAs stores blob under the proxy and domain of owner's live lease
// id (an empty blob drops what is kept). Errors: ErrUnknownLease and the
// like for the ID, ErrNotLeader when not leading or fenced, a *FieldError
// when the lease has no domain, a *StateTooLargeError.
func (s *Store) PutStateAs(owner, id string, blob []byte) error {
	if len(blob) > MaxStateSize {
		return &StateTooLargeError{Size: len(blob)}
	}
	tok, err := s.signer.decodeOwned(owner, id)
	if err != nil {
		return err
	}
	p, ok := s.locked(func(now time.Time) {
		var l *lease
		if err = s.st.term.grants(s.cfg, now); err == nil {
			l, err = s.find(tok, now)
		}
		if err != nil {
			return
		}
		if l.domain == "" {
			err = &FieldError{Field: "domain", Message: "the lease was acquired without a domain: session state is kept per proxy and domain"}
			return
		}
		s.commit(StatePut{key: stateKeyOf(l), blob: blob})
	})
	if err == nil {
		err = settle(p, ok)
	}
	return err
}

// PutSessionStateAs stores blob for the live leases owner's session holds
// in scope (as DELETE /v1/sessions names them), each under its proxy and
// its own domain. domain, when given, must be that domain: state is kept
// only for what a lease is for, so no caller plants a jar for a domain it
// holds no lease for. It is how a crawler that goes through the gateway,
// and so never sees the lease's ID, keeps its jar. ErrUnknownLease when
// the session holds none.
func (s *Store) PutSessionStateAs(owner, scope, session, domain string, blob []byte) error {
	if len(blob) > MaxStateSize {
		return &StateTooLargeError{Size: len(blob)}
	}
	domain = hostrule.NormalizeDomain(domain)
	var err error
	p, ok := s.locked(func(now time.Time) {
		if err = s.st.term.grants(s.cfg, now); err != nil {
			return
		}
		held, kept := false, false
		for _, l := range sortedLeases(s.st.leases, func(l *lease) bool {
			return l.state == stateLive && l.owner == owner && l.session == session && l.sessionScope == scope
		}) {
			held = true
			if l.domain == "" || (domain != "" && domain != l.domain) {
				continue
			}
			s.commit(StatePut{key: stateKeyOf(l), blob: blob})
			kept = true
		}
		switch {
		case !held:
			err = ErrUnknownLease
		case !kept && domain == "":
			err = &FieldError{Field: "domain", Message: "the session's lease was acquired without a domain: session state is kept per proxy and domain"}
		case !kept:
			err = &FieldError{Field: "domain", Message: fmt.Sprintf("the session holds no lease for %q: state is kept only for a lease's own domain", truncate(domain))}
		}
	})
	if err == nil {
		err = settle(p, ok)
	}
	return err
}

// ForgetSession drops owner's sticky choice of session in scope, so that
// its next acquire chooses afresh. Another identity's session of the same
// name is not touched.
func (s *Store) ForgetSession(owner, scope, session string) {
	p, ok := s.locked(func(time.Time) {
		key := sessionKey{owner, scope, session}
		if _, ok := s.st.sessions.chosen(key); ok {
			s.commit(SessionDrop{key: key})
		}
	})
	_ = settle(p, ok)
}
