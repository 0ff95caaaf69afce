package lease

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// The lease operations of the Store: acquire (selection), renew, release,
// inspection, and re-learning a previous leader's leases from their IDs.

// AcquireRequest asks for a lease.
type AcquireRequest struct {
	// Holder names the worker, for listing and logs. Required.
	Holder string
	// Namespace restricts the choice to one namespace; empty: any.
	Namespace string
	// Selector restricts the choice by labels; nil: any.
	Selector labels.Selector
	// TTL is the lease's lifetime until renewed; 0: Config.DefaultTTL.
	TTL time.Duration
	// Domain skips proxies cooling down for it, and is the default domain of
	// a banned release.
	Domain string
	// Session makes the choice sticky: the session's previous proxy again
	// while it is Ready, free and otherwise acceptable.
	Session string
	// Wait long-polls up to this long for capacity; 0: answer at once.
	Wait time.Duration
	// Owner is the authenticated identity acquiring (User.Identity): only
	// the same owner may renew, release or read the lease (RenewAs,
	// ReleaseAs, GetAs), and Config.MaxLeasesPerOwner caps what it holds.
	// Empty: an in-process caller; the lease is then reached with Renew,
	// Release and Get.
	Owner string
}

// Lease is a granted lease as callers see it.
type Lease struct {
	// ID is the lease's current ID; a renewal returns a new one (see token.go).
	ID     string
	Holder string
	// Owner is the identity that acquired it (AcquireRequest.Owner).
	Owner     string
	Proxy     LeasedProxy
	Session   string
	Domain    string
	GrantedAt time.Time
	ExpiresAt time.Time
	TTL       time.Duration
	// Slot is which of the proxy's MaxLeases places the lease holds.
	Slot int32
}

// LeasedProxy is the proxy a lease holds.
type LeasedProxy struct {
	Key           cache.ObjectName
	URL           string
	LatencyMillis int64
	// CredentialsSecret names the Secret of its credentials (ProxyInfo's), "" if none.
	CredentialsSecret string
}

// ProxyStatus is a Ready proxy as discovery shows it.
type ProxyStatus struct {
	Key           cache.ObjectName
	URL           string
	Labels        map[string]string
	LatencyMillis int64
	MaxLeases     int32
	// FreeLeases is how many more leases it takes now.
	FreeLeases int32
}

// LeaseFilter narrows List; empty fields match everything.
type LeaseFilter struct {
	Holder    string
	Namespace string
}

// Acquire grants a lease on the best proxy for req, waiting up to req.Wait
// for one to become available. Errors: *FieldError for a bad request,
// ErrNotLeader, *UnavailableError (ErrNoneFree, ErrCoolingDown,
// ErrRecovering), *HorizonError, or ctx's error while waiting.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	ttl, err := s.normalizeAcquire(&req)
	if err != nil {
		return Lease{}, err
	}
	var deadline time.Time
	waited := false
	for {
		now := s.clock.Now()
		s.mu.Lock()
		if !waited {
			// One clock read per attempt: the wait counts from the first.
			deadline = now.Add(req.Wait)
		}
		s.advanceLocked(now)
		l, err := s.tryAcquireLocked(&req, ttl, now)
		if err == nil {
			if waited {
				s.metrics.ObserveAcquire(AcquireWaited)
			} else {
				s.metrics.ObserveAcquire(AcquireGranted)
			}
			view, tok := viewOfLocked(l)
			s.mu.Unlock()
			return s.withID(view, tok), nil
		}
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || !now.Before(deadline) {
			refused := false
			if unavailable != nil {
				s.metrics.ObserveAcquire(outcomeOf(unavailable.Reason))
				refused = s.noteRefusalLocked(req.Namespace, req.Selector, req.Holder, unavailable, now) // demand.go
			}
			s.mu.Unlock()
			if refused {
				s.notifyDemand(req.Namespace, req.Selector)
			}
			return Lease{}, err
		}
		if err := s.waitForCapacity(ctx, &req, now, deadline, !waited); err != nil {
			return Lease{}, err
		}
		waited = true
	}
}

// normalizeAcquire checks req and fills in its defaults; it returns the
// lease's TTL.
func (s *Store) normalizeAcquire(req *AcquireRequest) (time.Duration, error) {
	ttl, err := s.ttlFor(req.TTL, "ttl")
	if err != nil {
		return 0, err
	}
	if req.Holder == "" {
		return 0, &FieldError{Field: "holder", Message: "is required"}
	}
	if req.Wait < 0 || req.Wait > s.cfg.MaxWait {
		return 0, &FieldError{Field: "wait", Message: fmt.Sprintf("must be between 0s and %v", s.cfg.MaxWait)}
	}
	if req.Selector == nil {
		req.Selector = labels.Everything()
	}
	req.Domain = NormalizeDomain(req.Domain)
	return ttl, nil
}

// waitForCapacity is called with the store locked and unlocks it. It
// sleeps until something may have changed for req: a release or a new
// Ready proxy (changed), an expiry, a cool-down or the recovery ending
// (nextEventLocked), or the deadline. The error is ctx's; first tells the
// pool autoscaler about a new waiter.
func (s *Store) waitForCapacity(ctx context.Context, req *AcquireRequest, now, deadline time.Time, first bool) error {
	wake := deadline
	if next := s.nextEventLocked(); !next.IsZero() && next.Before(wake) {
		wake = next
	}
	changed := s.changed
	s.waiting++
	waiter := s.addWaiterLocked(req.Namespace, req.Selector, req.Holder) // demand.go: the pool autoscaler counts it
	s.mu.Unlock()
	if first {
		s.notifyDemand(req.Namespace, req.Selector)
	}

	timer := s.clock.NewTimer(wake.Sub(now))
	select {
	case <-changed:
	case <-timer.C():
	case <-ctx.Done():
	}
	timer.Stop()
	s.mu.Lock()
	s.waiting--
	s.removeWaiterLocked(waiter)
	s.mu.Unlock()
	if ctx.Err() != nil {
		s.metrics.ObserveAcquire(AcquireCanceled)
		return ctx.Err()
	}
	return nil
}

func outcomeOf(reason error) string {
	switch {
	case errors.Is(reason, ErrCoolingDown):
		return AcquireCoolingDown
	case errors.Is(reason, ErrRecovering):
		return AcquireRecovering
	default:
		return AcquireNoneFree
	}
}

func (s *Store) tryAcquireLocked(req *AcquireRequest, ttl time.Duration, now time.Time) (*lease, error) {
	if !s.leading {
		return nil, ErrNotLeader
	}
	if s.recovering {
		return nil, &UnavailableError{Reason: ErrRecovering, RetryAfter: s.recoverUntil.Sub(now)}
	}
	if limit := s.cfg.MaxLeasesPerOwner; limit > 0 && req.Owner != "" && s.owned[req.Owner] >= limit {
		return nil, &OwnerLimitError{Limit: limit}
	}
	p, err := s.selectLocked(req, now)
	if err != nil {
		return nil, err
	}
	expiresAt := now.Add(ttl)
	if err := s.checkHorizonLocked(expiresAt); err != nil {
		return nil, err
	}
	s.serial++
	l := &lease{
		key:          leaseKey{epoch: s.epoch, serial: s.serial},
		proxy:        p,
		proxyKey:     p.info.Key,
		proxyUID:     p.info.UID,
		slot:         p.freeSlot(),
		holder:       req.Holder,
		owner:        req.Owner,
		session:      req.Session,
		sessionScope: req.Namespace,
		domain:       req.Domain,
		grantedAt:    now,
		expiresAt:    expiresAt,
		ttl:          ttl,
		urlHash:      p.urlHash,
		readySince:   p.info.ReadySince,
	}
	s.installLocked(l)
	p.burn.served++
	if req.Session != "" {
		s.useSessionLocked(sessionKey{req.Namespace, req.Session}, p.info.Key, now)
	}
	return l, nil
}

// selectLocked picks the proxy for req: the session's proxy if it is still
// acceptable, else the first acceptable one in selection order.
func (s *Store) selectLocked(req *AcquireRequest, now time.Time) (*proxyState, error) {
	acceptable := func(p *proxyState) bool {
		return p.free() && !p.info.Draining && req.Selector.Matches(labels.Set(p.info.Labels))
	}
	if req.Session != "" {
		if sess := s.sessions[sessionKey{req.Namespace, req.Session}]; sess != nil {
			if p := s.proxies[sess.proxy]; p != nil && p.ready() && acceptable(p) && p.coolingFor(req.Domain) == nil &&
				(req.Namespace == "" || p.info.Key.Namespace == req.Namespace) {
				return p, nil
			}
		}
	}
	order := s.order
	if req.Namespace != "" {
		if order = s.byNamespace[req.Namespace]; order == nil {
			return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
		}
	}
	var coolingUntil time.Time
	for p := order.front; p != nil; p = order.next(p) {
		if !acceptable(p) {
			continue
		}
		if c := p.coolingFor(req.Domain); c != nil {
			if coolingUntil.IsZero() || c.until.Before(coolingUntil) {
				coolingUntil = c.until
			}
			continue
		}
		return p, nil
	}
	if !coolingUntil.IsZero() {
		return nil, &UnavailableError{Reason: ErrCoolingDown, RetryAfter: coolingUntil.Sub(now)}
	}
	// Capacity can come back at any release; there is no better hint.
	return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
}

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
	if !s.leading {
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
		if sess := s.sessions[sessionKey{l.sessionScope, l.session}]; sess != nil && sess.proxy == l.proxyKey {
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
		// it ended, so that its ID cannot be re-learned later.
		s.tombstoneLocked(tok, stateReleased)
	default:
		return ErrUnknownLease
	}
	if outcome == OutcomeBanned {
		if p := s.proxies[tok.proxy]; p != nil && p.info.UID == tok.proxyUID {
			s.banLocked(p, domain, now)
			p.burn.noteBan(domain, now)
		}
	}
	return nil
}

// releaseLiveLocked ends a live lease released by its holder. The release
// is stamped no earlier than the one before it (decision 163), so that the
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

// Get returns a live lease acquired without an owner; see GetAs.
func (s *Store) Get(id string) (Lease, error) {
	return s.GetAs("", id)
}

// GetAs returns a live lease of owner. Errors as RenewAs.
func (s *Store) GetAs(owner, id string) (Lease, error) {
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return Lease{}, err
	}
	s.mu.Lock()
	now := s.clock.Now()
	s.advanceLocked(now)
	if !s.leading {
		s.mu.Unlock()
		return Lease{}, ErrNotLeader
	}
	l, err := s.findLocked(tok, now)
	if err != nil {
		s.mu.Unlock()
		return Lease{}, err
	}
	view, found := viewOfLocked(l)
	s.mu.Unlock()
	return s.withID(view, found), nil
}

// LeaseNamespace returns the namespace of the proxy a lease ID names, for
// authorization before the lease is looked up; ErrUnknownLease if id is not
// a lease ID.
func (s *Store) LeaseNamespace(id string) (string, error) {
	tok, err := s.signer.decode(id)
	if err != nil {
		return "", ErrUnknownLease
	}
	return tok.proxy.Namespace, nil
}

// leaseNamespaceAs is LeaseNamespace for owner's leases only: another
// owner's ID is ErrUnknownLease before anything else is looked at.
func (s *Store) leaseNamespaceAs(owner, id string) (string, error) {
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return "", err
	}
	return tok.proxy.Namespace, nil
}

// decodeOwned decodes a lease ID that owner may use: an ID that is not
// ours, and one of another owner, are both ErrUnknownLease, so that nobody
// learns whether another's lease exists.
func (s *Store) decodeOwned(owner, id string) (token, error) {
	tok, err := s.signer.decode(id)
	if err != nil || tok.owner != owner {
		return token{}, ErrUnknownLease
	}
	return tok, nil
}

// List returns the live leases that match f, oldest grant first.
func (s *Store) List(f LeaseFilter) ([]Lease, error) {
	s.mu.Lock()
	s.advanceLocked(s.clock.Now())
	if !s.leading {
		s.mu.Unlock()
		return nil, ErrNotLeader
	}
	var live []*lease
	for _, l := range s.leases {
		if l.state == stateLive && (f.Holder == "" || l.holder == f.Holder) && (f.Namespace == "" || l.proxyKey.Namespace == f.Namespace) {
			live = append(live, l)
		}
	}
	slices.SortFunc(live, func(a, b *lease) int {
		if c := a.grantedAt.Compare(b.grantedAt); c != 0 {
			return c
		}
		if a.key.less(b.key) {
			return -1
		}
		return 1
	})
	out := make([]Lease, len(live))
	toks := make([]token, len(live))
	for i, l := range live {
		out[i], toks[i] = viewOfLocked(l)
	}
	s.mu.Unlock()
	for i := range out {
		out[i] = s.withID(out[i], toks[i])
	}
	return out, nil
}

// Proxies returns the Ready proxies in namespace (empty: all) that match
// sel (nil: all), sorted by namespace and name.
func (s *Store) Proxies(namespace string, sel labels.Selector) []ProxyStatus {
	if sel == nil {
		sel = labels.Everything()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
	var out []ProxyStatus
	for _, p := range s.proxies {
		if !p.ready() || (namespace != "" && p.info.Key.Namespace != namespace) || !sel.Matches(labels.Set(p.info.Labels)) {
			continue
		}
		out = append(out, ProxyStatus{
			Key:           p.info.Key,
			URL:           p.info.URL,
			Labels:        maps.Clone(p.info.Labels),
			LatencyMillis: p.info.LatencyMillis,
			MaxLeases:     int32(p.capacity()),
			FreeLeases:    int32(max(0, p.capacity()-p.held)),
		})
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	return out
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
		key:        tok.key,
		proxy:      p,
		proxyKey:   tok.proxy,
		proxyUID:   tok.proxyUID,
		slot:       tok.slot,
		holder:     tok.holder,
		owner:      tok.owner,
		domain:     tok.domain,
		grantedAt:  tok.grantedAt,
		expiresAt:  tok.expiresAt,
		ttl:        tok.ttl,
		urlHash:    tok.urlHash,
		readySince: tok.readySince,
	}
	s.installLocked(l)
	return l, nil
}
