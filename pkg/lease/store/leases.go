package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Acquiring a lease, in one place: the request and the lease as callers
// see it, Acquire from the checks of the request through the wait and the
// selection to the grant, and the view of a granted lease (its ID signed
// after the lock). The subsystems an acquire consults have files of their
// own: sessions (bounded.go), crawl-policy budgets (politeness.go,
// domainbudgets.go), demand (demand.go), session state (sessionstate.go).
// Renew and release: renewrelease.go; reading: lookups.go.

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
	// Session makes the choice sticky: while the session holds a live
	// lease of the same owner, the acquire joins it (the same lease, its
	// expiry extended to the TTL asked for); otherwise the session's
	// previous proxy again while it is Ready, free and otherwise acceptable.
	Session string
	// Wait long-polls up to this long for capacity; 0: answer at once.
	Wait time.Duration
	// Owner is the authenticated identity acquiring (User.Identity): only
	// the same owner may renew, release or read the lease (RenewAs,
	// ReleaseAs, GetAs), and Config.MaxLeasesPerOwner caps what it holds.
	// Empty: an in-process caller; the lease is then reached with Renew,
	// Release and Get.
	Owner string
	// Country restricts the choice to proxies whose ExitCountry it is: an
	// ISO 3166-1 alpha-2 code in upper case; empty: any.
	Country string
}

// suits says whether p is what req asks for: its selector and its country
// (docs/decisions/0331-acquire-by-measured-exit-country.md).
func (req *AcquireRequest) suits(p *proxyState) bool {
	return req.Selector.Matches(labels.Set(p.info.Labels)) && (req.Country == "" || p.info.ExitCountry == req.Country)
}

// Lease is a granted lease as callers see it.
type Lease struct {
	// ID is the lease's current ID; a renewal returns a new one (see token.go).
	ID string
	// Ref names the lease for its whole life, the same in every ID of it;
	// it is no secret.
	Ref    LeaseRef
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
	// State is the session state kept for the proxy and domain, set in a
	// grant only (sessionstate.go). Secret to the holder: never log it.
	State []byte
}

// LeasedProxy is the proxy a lease holds.
type LeasedProxy struct {
	Key ObjectName
	// UID tells the leased Proxy from a later one of the same name.
	UID           types.UID
	URL           string
	LatencyMillis int64
	// CredentialsSecret names the Secret of its credentials (ProxyInfo's), "" if none.
	CredentialsSecret string
	// Pool is the ProxyPool the proxy is a member of, "" if none.
	Pool string
}

// ProxyStatus is a Ready proxy as discovery shows it.
type ProxyStatus struct {
	Key           ObjectName
	URL           string
	Labels        map[string]string
	LatencyMillis int64
	MaxLeases     int32
	// FreeLeases is how many more leases it takes now.
	FreeLeases int32
	// ExitCountry is ProxyInfo.ExitCountry, "" if unknown.
	ExitCountry string
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
			view.State = s.stateLocked(l)
			s.mu.Unlock()
			return s.withID(view, tok), nil
		}
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || !now.Before(deadline) {
			err = inCountry(err, req.Country)
			refused := false
			if unavailable != nil {
				s.metrics.ObserveAcquire(outcomeOf(unavailable.Reason))
				refused = s.noteRefusalLocked(req.Namespace, req.Selector, req.Holder, unavailable, now) // demand.go
				if unavailable.budget != nil {
					s.notePoliteLocked(unavailable.budget, true)
				}
			}
			s.mu.Unlock()
			if refused {
				s.notifyDemand(req.Namespace, req.Selector)
			}
			return Lease{}, err
		}
		wake := deadline
		if unavailable.budget != nil {
			// An interval ends at a known time; a release wakes us anyway.
			if t := now.Add(unavailable.RetryAfter); t.Before(wake) {
				wake = t
			}
			if !waited {
				s.notePoliteLocked(unavailable.budget, false)
			}
		}
		// A wait for a domain's budget is no demand for more proxies.
		if err := s.waitForCapacity(ctx, &req, now, wake, !waited, unavailable.budget == nil); err != nil {
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
	if req.Country != "" && !IsCountryCode(req.Country) {
		return 0, &FieldError{Field: "country", Message: fmt.Sprintf("%q is not an ISO 3166-1 alpha-2 code in upper case (such as DE)", req.Country)}
	}
	req.Domain = NormalizeDomain(req.Domain)
	return ttl, nil
}

// waitForCapacity is called with the store locked and unlocks it. It
// sleeps until something may have changed for req: a release or a new
// Ready proxy (changed), an expiry, a cool-down or the recovery ending
// (nextEventLocked), or the deadline. The error is ctx's; first tells the
// pool autoscaler about a new waiter.
func (s *Store) waitForCapacity(ctx context.Context, req *AcquireRequest, now, deadline time.Time, first, demand bool) error {
	wake := deadline
	if next := s.nextEventLocked(); !next.IsZero() && next.Before(wake) {
		wake = next
	}
	changed := s.changed
	s.waiting++
	var waiter uint64
	if demand {
		waiter = s.addWaiterLocked(req.Namespace, req.Selector, req.Holder) // demand.go: the pool autoscaler counts it
	}
	s.mu.Unlock()
	if first && demand {
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
	if demand {
		s.removeWaiterLocked(waiter)
	}
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
	case errors.Is(reason, ErrDomainLimited):
		return AcquireDomainLimited
	default:
		return AcquireNoneFree
	}
}

func (s *Store) tryAcquireLocked(req *AcquireRequest, ttl time.Duration, now time.Time) (*lease, error) {
	if !s.grantingLocked(now) {
		return nil, ErrNotLeader
	}
	// Joining takes no capacity, so it needs no recovery: a session's next
	// connection through the gateway goes on during a failover.
	if l := s.sessionLeaseLocked(req); l != nil {
		if err := s.joinLocked(l, ttl, now); err != nil {
			return nil, err
		}
		return l, nil
	}
	if s.recovering {
		return nil, &UnavailableError{Reason: ErrRecovering, RetryAfter: s.recoverUntil.Sub(now)}
	}
	if limit := s.cfg.MaxLeasesPerOwner; limit > 0 && req.Owner != "" && s.owned[req.Owner] >= limit {
		return nil, &OwnerLimitError{Limit: limit}
	}
	tiers := s.tierCheckLocked(req, now, false) // tiers.go
	p, err := s.selectLocked(req, now, &tiers)
	if err != nil && tiers.probing() {
		// A probe of a cheaper tier with nothing free there: the grant
		// goes to the budget's tier as if it were no probe.
		tiers = s.tierCheckLocked(req, now, true)
		p, err = s.selectLocked(req, now, &tiers)
	}
	if err != nil {
		return nil, err
	}
	if err := s.admitDomainBudgetLocked(p.info.Key.Namespace, req.Domain, now); err != nil {
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
	noteGrantLocked(l, now)
	s.noteTierGrantLocked(&tiers, p, now)
	p.burn.served++
	if req.Session != "" {
		s.useSessionLocked(sessionKey{req.Owner, req.Namespace, req.Session}, p.info.Key, now)
	}
	return l, nil
}

// sessionLeaseLocked is the live lease req's session holds, if its owner
// is req's and its proxy still suits req; nil otherwise. So two gateway
// replicas carrying one session leave through one upstream.
func (s *Store) sessionLeaseLocked(req *AcquireRequest) *lease {
	if req.Session == "" {
		return nil
	}
	sess := s.sessions[sessionKey{req.Owner, req.Namespace, req.Session}]
	if sess == nil {
		return nil
	}
	p := s.proxies[sess.proxy]
	if p == nil || p.info.Draining || !req.suits(p) || p.coolingFor(req.Domain) != nil {
		return nil
	}
	for _, l := range p.slots {
		if l != nil && l.state == stateLive && l.owner == req.Owner && l.session == req.Session && l.sessionScope == req.Namespace {
			return l
		}
	}
	return nil
}

// joinLocked hands a session's live lease to another of its acquires,
// extending it to ttl from now when that is later.
func (s *Store) joinLocked(l *lease, ttl time.Duration, now time.Time) error {
	if expiresAt := now.Add(ttl); expiresAt.After(l.expiresAt) {
		if err := s.checkHorizonLocked(expiresAt); err != nil {
			return err
		}
		l.expiresAt, l.ttl = expiresAt, ttl
		heap.Fix(&s.expiries, l.index)
	}
	s.useSessionLocked(sessionKey{l.owner, l.sessionScope, l.session}, l.proxyKey, now)
	return nil
}

// selectLocked picks the proxy for req: the session's proxy if it is still
// acceptable, else the first acceptable one in selection order. A tiered
// acquire accepts only the proxies of its budget's tier.
func (s *Store) selectLocked(req *AcquireRequest, now time.Time, tiers *tierCheck) (*proxyState, error) {
	acceptable := func(p *proxyState) bool {
		return p.free() && !p.info.Draining && req.suits(p) && tiers.allows(p)
	}
	polite := s.politeCheckLocked(req.Domain, now)
	if req.Session != "" {
		if sess := s.sessions[sessionKey{req.Owner, req.Namespace, req.Session}]; sess != nil {
			if p := s.proxies[sess.proxy]; p != nil && p.ready() && acceptable(p) && p.coolingFor(req.Domain) == nil &&
				(req.Namespace == "" || p.info.Key.Namespace == req.Namespace) {
				if until, _ := polite.until(p); until.IsZero() {
					return p, nil
				}
			}
		}
	}
	order := s.order
	if req.Namespace != "" {
		if order = s.byNamespace[req.Namespace]; order == nil {
			return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
		}
	}
	var coolingUntil, politeUntil time.Time
	var limitedBy *budget
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
		if until, b := polite.until(p); !until.IsZero() {
			if politeUntil.IsZero() || until.Before(politeUntil) {
				politeUntil, limitedBy = until, b
			}
			continue
		}
		return p, nil
	}
	if !politeUntil.IsZero() {
		return nil, &UnavailableError{Reason: ErrDomainLimited, RetryAfter: politeUntil.Sub(now), budget: limitedBy}
	}
	if !coolingUntil.IsZero() {
		return nil, &UnavailableError{Reason: ErrCoolingDown, RetryAfter: coolingUntil.Sub(now)}
	}
	// Capacity can come back at any release; there is no better hint.
	return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
}

// ttlFor applies the default and the bounds to a requested TTL.
func (s *Store) ttlFor(ttl time.Duration, field string) (time.Duration, error) {
	if ttl == 0 {
		return s.cfg.DefaultTTL, nil
	}
	if ttl < s.cfg.MinTTL || ttl > s.cfg.MaxTTL {
		return 0, &FieldError{Field: field, Message: fmt.Sprintf("must be between %v and %v", s.cfg.MinTTL, s.cfg.MaxTTL)}
	}
	return ttl, nil
}

func (s *Store) checkHorizonLocked(expiresAt time.Time) error {
	if !s.unbounded && expiresAt.After(s.horizon) {
		return &HorizonError{Need: expiresAt}
	}
	return nil
}

// viewOfLocked is a live lease as callers see it, but for its ID, and the
// token its ID encodes: sign it (withID) once the store is unlocked.
func viewOfLocked(l *lease) (Lease, token) {
	return Lease{
			Ref:    l.key.ref(),
			Holder: l.holder,
			Owner:  l.owner,
			Proxy: LeasedProxy{
				Key: l.proxyKey, UID: l.proxyUID, URL: l.proxy.info.URL, LatencyMillis: l.proxy.info.LatencyMillis,
				CredentialsSecret: l.proxy.info.CredentialsSecret,
				Pool:              l.proxy.info.Pool,
			},
			Session:   l.session,
			Domain:    l.domain,
			GrantedAt: l.grantedAt,
			ExpiresAt: l.expiresAt,
			TTL:       l.ttl,
			Slot:      l.slot,
		}, token{
			key: l.key, slot: l.slot, grantedAt: l.grantedAt, expiresAt: l.expiresAt, ttl: l.ttl, urlHash: l.urlHash, readySince: l.readySince,
			proxy: l.proxyKey, proxyUID: l.proxyUID, holder: l.holder, domain: l.domain, owner: l.owner,
			session: l.session, sessionScope: l.sessionScope,
		}
}

// withID is view with the ID of tok. Sign after unlocking the store: the
// lock is held only for the store's own work.
func (s *Store) withID(view Lease, tok token) Lease {
	view.ID = s.signer.encode(tok)
	return view
}

// NormalizeDomain lower-cases a domain and drops a trailing dot, so that
// cool-downs match however a client spells the name.
func NormalizeDomain(domain string) string {
	return strings.TrimSuffix(strings.ToLower(domain), ".")
}
