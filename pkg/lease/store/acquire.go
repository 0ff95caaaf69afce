package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Acquiring a lease, in one place: the request and the lease as callers
// see it, Acquire from the checks of the request through the wait and the
// selection to the grant, and the view of a granted lease (its ID signed
// after the lock). The selection asks the policies (policy.go) about each
// candidate; the grant is an effect (effects.go). Renew and release:
// holders.go; reading: reads.go.

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
	// RequestID names this acquire so that sending it again (its answer
	// was lost) gets the lease it got, while that lease lives, not a second
	// one (requests.go); empty: every acquire is a new one.
	RequestID string

	// site is Domain's site (Config.Site), set by normalizeAcquire:
	// cool-downs and site bans are the site's, whichever of its names is
	// asked for.
	site string
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
// ErrRecovering, ErrDomainLimited), *SiteBanningError (at once, without
// waiting), *OwnerLimitError, *HorizonError, or ctx's error while waiting.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	ttl, err := normalizeAcquire(s.cfg, &req)
	if err != nil {
		return Lease{}, err
	}
	var deadline time.Time
	for attempt := 0; ; attempt++ {
		var (
			view      Lease
			tok       token
			wait      func() error
			refusedBy bool
		)
		p, ok := s.locked(func(now time.Time) {
			if attempt == 0 {
				deadline = now.Add(req.Wait) // the wait counts from the first attempt
			}
			var l *lease
			l, err = s.tryAcquire(&req, ttl, now)
			if err == nil {
				view, tok = viewOf(l)
				view.State = s.st.states.blob(l)
				if attempt > 0 {
					s.cfg.Metrics.ObserveAcquire(AcquireWaited)
				} else {
					s.cfg.Metrics.ObserveAcquire(AcquireGranted)
				}
				return
			}
			var unavailable *UnavailableError
			if !errors.As(err, &unavailable) || !now.Before(deadline) {
				err = inCountry(err, req.Country)
				if errors.Is(err, ErrSiteBanning) {
					s.cfg.Metrics.ObserveAcquire(AcquireSiteBanning)
				}
				refusedBy = s.refused(&req, unavailable, now)
				return
			}
			wait = s.prepareWait(ctx, &req, unavailable, now, deadline, attempt == 0)
		})
		if err == nil {
			err = settle(p, ok)
		}
		switch {
		case err == nil:
			return s.signer.withID(view, tok), nil
		case wait == nil:
			if refusedBy {
				s.st.demand.notifyDemand(req.Namespace, req.Selector)
			}
			return Lease{}, err
		}
		if err := wait(); err != nil {
			return Lease{}, err
		}
	}
}

// refused counts a refused acquire (metrics, the budget that refused it,
// demand) and says whether demand should be told.
func (s *Store) refused(req *AcquireRequest, unavailable *UnavailableError, now time.Time) bool {
	if unavailable == nil {
		return false
	}
	s.cfg.Metrics.ObserveAcquire(outcomeOf(unavailable.Reason))
	if unavailable.limited {
		s.commit(PoliteNote{rule: unavailable.rule, refused: true})
	}
	if outcomeOf(unavailable.Reason) != AcquireNoneFree {
		return false // more members would not help a cool-down or a recovery
	}
	s.commit(Refusal{namespace: req.Namespace, selector: req.Selector, holder: req.Holder, at: now})
	return true
}

// prepareWait registers an acquire that will sleep until something may have
// changed for it: a release or a new Ready proxy (wake), an expiry, a
// cool-down or the recovery ending (nextEvent), the end of the interval
// that limits it, or the deadline. It returns the sleep, to run without
// the lock; its error is ctx's.
func (s *Store) prepareWait(ctx context.Context, req *AcquireRequest, unavailable *UnavailableError, now, deadline time.Time, first bool) func() error {
	wake := deadline
	if unavailable.limited {
		// An interval ends at a known time; a release wakes us anyway.
		if t := now.Add(unavailable.RetryAfter); t.Before(wake) {
			wake = t
		}
		if first {
			s.commit(PoliteNote{rule: unavailable.rule})
		}
	}
	if next := nextEvent(s.st.expiries, s.st.cooldowns, &s.st.term); !next.IsZero() && next.Before(wake) {
		wake = next
	}
	changed := s.st.wake.changed
	s.st.wake.waiting++
	// A wait for a domain's budget is no demand for more proxies.
	demand := !unavailable.limited
	var waiter uint64
	if demand {
		waiter = s.st.demand.addWaiter(req.Namespace, req.Selector, req.Holder)
	}
	namespace, selector := req.Namespace, req.Selector // not req: it would escape with the sleep
	return func() error {
		if first && demand {
			s.st.demand.notifyDemand(namespace, selector)
		}
		timer := s.clock.NewTimer(wake.Sub(now))
		select {
		case <-changed:
		case <-timer.C():
		case <-ctx.Done():
		}
		timer.Stop()
		s.mu.Lock()
		s.st.wake.waiting--
		if demand {
			s.st.demand.removeWaiter(waiter)
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			s.cfg.Metrics.ObserveAcquire(AcquireCanceled)
			return ctx.Err()
		}
		return nil
	}
}

// normalizeAcquire checks req and fills in its defaults; it returns the
// lease's TTL.
func normalizeAcquire(cfg Config, req *AcquireRequest) (time.Duration, error) {
	ttl, err := cfg.ttlFor(req.TTL, "ttl")
	if err != nil {
		return 0, err
	}
	if req.Holder == "" {
		return 0, &FieldError{Field: "holder", Message: "is required"}
	}
	if req.Wait < 0 || req.Wait > cfg.MaxWait {
		return 0, &FieldError{Field: "wait", Message: fmt.Sprintf("must be between 0s and %v", cfg.MaxWait)}
	}
	if req.Selector == nil {
		req.Selector = labels.Everything()
	}
	if req.Country != "" && !wire.IsCountryCode(req.Country) {
		return 0, &FieldError{Field: "country", Message: fmt.Sprintf("%q is not an ISO 3166-1 alpha-2 code in upper case (such as DE)", req.Country)}
	}
	if len(req.RequestID) > MaxRequestIDLen {
		return 0, &FieldError{Field: "requestId", Message: fmt.Sprintf("at most %d bytes; got %d", MaxRequestIDLen, len(req.RequestID))}
	}
	req.Domain = hostrule.NormalizeDomain(req.Domain)
	req.site = cfg.Site(req.Domain)
	return ttl, nil
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

// tryAcquire grants req a lease now, or says why not: it joins the
// session's live lease, or selects a proxy and commits the grant.
func (s *Store) tryAcquire(req *AcquireRequest, ttl time.Duration, now time.Time) (*lease, error) {
	st := s.st
	if err := st.term.grants(s.cfg, now); err != nil {
		return nil, err
	}
	// The same acquire again gets what it got.
	if l := st.requests.leaseOf(req.Owner, req.RequestID, st.leases); l != nil {
		return l, nil
	}
	// Joining takes no capacity, so it needs no recovery: a session's next
	// connection through the gateway goes on during a failover.
	if l := sessionLease(st.sessions, st.proxies, st.cooldowns, req); l != nil {
		join := Join{key: l.key, expiresAt: l.expiresAt, ttl: l.ttl, at: now}
		if expiresAt := now.Add(ttl); expiresAt.After(l.expiresAt) {
			if err := st.term.allows(expiresAt); err != nil {
				return nil, err
			}
			join.expiresAt, join.ttl = expiresAt, ttl
		}
		s.commit(join)
		return l, nil
	}
	if st.term.recovering {
		return nil, &UnavailableError{Reason: ErrRecovering, RetryAfter: st.term.recoverUntil.Sub(now)}
	}
	if limit := s.cfg.MaxLeasesPerOwner; limit > 0 && req.Owner != "" && st.owned[req.Owner] >= limit {
		return nil, &OwnerLimitError{Limit: limit}
	}
	p, err := selectProxy(st, req, now)
	if err != nil {
		return nil, err
	}
	g := Grant{requestID: req.RequestID, lease: token{
		key: leaseKey{epoch: st.term.epoch, serial: st.term.serial + 1}, slot: p.freeSlot(),
		grantedAt: now, expiresAt: now.Add(ttl), ttl: ttl, urlHash: p.urlHash, readySince: p.info.ReadySince,
		proxy: p.info.Key, proxyUID: p.info.UID, holder: req.Holder, domain: req.Domain, owner: req.Owner,
		session: req.Session, sessionScope: req.Namespace,
	}}
	for _, pol := range st.policies {
		note, err := pol.confirm(p, now, s.emit)
		if err != nil {
			return nil, err
		}
		if note.tiered {
			g.tier = note
		}
	}
	if err := st.term.allows(g.lease.expiresAt); err != nil {
		return nil, err
	}
	s.commit(g)
	return st.leases[g.lease.key], nil
}

// sessionLease is the live lease req's session holds, if its owner is
// req's and its proxy still suits req; nil otherwise. So two gateway
// replicas carrying one session leave through one upstream.
func sessionLease(sessions *sessions, proxies map[ObjectName]*proxyState, cooldowns *cooldowns, req *AcquireRequest) *lease {
	if req.Session == "" {
		return nil
	}
	chosen, ok := sessions.chosen(sessionKey{req.Owner, req.Namespace, req.Session})
	if !ok {
		return nil
	}
	p := proxies[chosen]
	if p == nil || p.info.Draining || !req.suits(p) || cooldowns.coolingFor(p.info.Key, req.site) != nil {
		return nil
	}
	for _, l := range p.slots {
		if l != nil && l.state == stateLive && l.owner == req.Owner && l.session == req.Session && l.sessionScope == req.Namespace {
			return l
		}
	}
	return nil
}

// selectProxy picks the proxy for req: the session's proxy if every
// policy admits it, else the first in selection order that every policy
// admits. When none does and a policy would admit more in a relaxed
// selection (a tier probe), it selects once more, relaxed.
func selectProxy(st *state, req *AcquireRequest, now time.Time) (*proxyState, error) {
	var gates [8]policy
	active := prepareGates(st.policies, req, now, false, gates[:0])
	p, err := selectAmong(st, req, active, now)
	if err != nil && slices.ContainsFunc(active, policy.relaxable) {
		active = prepareGates(st.policies, req, now, true, gates[:0])
		p, err = selectAmong(st, req, active, now)
	}
	return p, err
}

// prepareGates is the policies that have a say on req's selection.
func prepareGates(policies []policy, req *AcquireRequest, now time.Time, relaxed bool, out []policy) []policy {
	for _, pol := range policies {
		if pol.prepare(*req, now, relaxed) {
			out = append(out, pol)
		}
	}
	return out
}

// selectAmong is one selection with the prepared gates.
func selectAmong(st *state, req *AcquireRequest, gates []policy, now time.Time) (*proxyState, error) {
	acceptable := func(p *proxyState) bool { return p.free() && !p.info.Draining && req.suits(p) }
	admitted := func(p *proxyState) refusal {
		for _, pol := range gates {
			if r := pol.admit(p); r.reason != nil {
				return r
			}
		}
		return refusal{}
	}
	if req.Session != "" {
		if chosen, ok := st.sessions.chosen(sessionKey{req.Owner, req.Namespace, req.Session}); ok {
			if p := st.proxies[chosen]; p != nil && p.ready() && acceptable(p) &&
				(req.Namespace == "" || p.info.Key.Namespace == req.Namespace) && admitted(p).reason == nil {
				return p, nil
			}
		}
	}
	order := st.order
	if req.Namespace != "" {
		if order = st.byNamespace[req.Namespace]; order == nil {
			return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
		}
	}
	var cooling, limited, siteBanning refusal
	for p := order.front; p != nil; p = order.next(p) {
		if !acceptable(p) {
			continue
		}
		r := admitted(p)
		switch {
		case r.reason == nil:
			return p, nil
		case r.reason == ErrCoolingDown && (cooling.reason == nil || r.until.Before(cooling.until)):
			cooling = r
		case r.reason == ErrDomainLimited && (limited.reason == nil || r.until.Before(limited.until)):
			limited = r
		case r.reason == ErrSiteBanning && (siteBanning.reason == nil || r.until.Before(siteBanning.until)):
			siteBanning = r
		}
	}
	if limited.reason != nil {
		return nil, &UnavailableError{Reason: ErrDomainLimited, RetryAfter: limited.until.Sub(now), rule: limited.rule, limited: true}
	}
	if siteBanning.reason != nil {
		// No wait helps and no member more would: answered at once.
		return nil, st.siteBans.refusedFor(req.site, now, siteBanning.until)
	}
	if cooling.reason != nil {
		return nil, &UnavailableError{Reason: ErrCoolingDown, RetryAfter: cooling.until.Sub(now)}
	}
	// Capacity can come back at any release; there is no better hint.
	return nil, &UnavailableError{Reason: ErrNoneFree, RetryAfter: time.Second}
}

// viewOf is a live lease as callers see it, but for its ID, and the token
// its ID encodes: sign it (signer.withID) once the store is unlocked.
func viewOf(l *lease) (Lease, token) {
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
	}, tokenOf(l)
}
