package store

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// The Store's configuration, its defaults and their checks, and the
// outcomes a release reports.

// Defaults of Config.
const (
	DefaultTTL           = 60 * time.Second
	DefaultMinTTL        = 5 * time.Second
	DefaultMaxTTL        = 10 * time.Minute
	DefaultMaxWait       = 60 * time.Second
	DefaultCooldownBase  = time.Minute
	DefaultCooldownMax   = time.Hour
	DefaultCooldownDecay = time.Hour
	DefaultSessionIdle   = time.Hour
	DefaultMaxSessions   = 100000
	DefaultMaxCooldowns  = 100000
)

// maxSlots is the CRD's maximum of spec.maxLeases.
const maxSlots = 10000

// Config configures a Store. Zero durations take the defaults above.
type Config struct {
	// Clock drives expiry, cool-downs and waits. Default: the real clock.
	Clock clock.WithTicker
	// Key signs lease IDs (at least MinKeyLen bytes). Every replica must
	// share it, or a new leader cannot re-learn the old leader's leases.
	Key []byte
	// DefaultTTL applies when a request names none; MinTTL and MaxTTL bound
	// what a request may ask for.
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// MaxWait bounds an acquire's long poll.
	MaxWait time.Duration
	// CooldownBase is the first cool-down after a ban; each further ban
	// doubles it up to CooldownMax; each quiet CooldownDecay after a
	// cool-down ends forgets one ban.
	CooldownBase, CooldownMax, CooldownDecay time.Duration
	// SessionIdle is how long an unused sticky session is remembered.
	SessionIdle time.Duration
	// MaxSessions and MaxCooldowns bound the sticky sessions and the
	// (proxy, domain) cool-down entries kept, so that a misbehaving crawler
	// cannot grow the leader without limit (see sessions.go and cooldowns.go for what is
	// evicted). Zero takes the defaults.
	MaxSessions, MaxCooldowns int
	// MaxDomainBudgets bounds the crawl policies' default-rule budgets, one
	// per domain (budgets.go). Zero takes DefaultMaxDomainBudgets.
	MaxDomainBudgets int
	// MaxStateBytes bounds the session state kept (sessionstate.go), each
	// entry counted as its blob, its key's bytes and StateEntryOverhead;
	// MaxStateEntries bounds the entries, MaxStateBytesPerOwner what one
	// identity keeps. Zero takes the defaults (DefaultMaxStateBytes...).
	MaxStateBytes, MaxStateEntries, MaxStateBytesPerOwner int
	// SiteBanProxies is how many distinct proxies of a namespace one site
	// may ban within SiteBanWindow before no lease for the site is granted
	// on that namespace's proxies (sitebans.go), 1 to MaxSiteBanProxies.
	// Zero takes DefaultSiteBanProxies and DefaultSiteBanWindow.
	SiteBanProxies int
	SiteBanWindow  time.Duration
	// Site is the site a (normalized) domain belongs to, the unit that
	// cool-downs, burn and site bans count: site.Of
	// (pkg/hostrule/site, the public suffix list), which the store does
	// not import because it links in net/http. Every replica must be given
	// the same function. Nil: every host is its own site.
	Site func(domain string) string
	// MaxLeasesPerOwner caps the live leases one authenticated identity
	// holds (AcquireRequest.Owner); 0: no cap. Leases without an owner
	// (in-process callers) are not capped.
	MaxLeasesPerOwner int
	// Metrics receives measurements. Default: none.
	Metrics Metrics
	// LeadershipValidUntil, if set, says until when this replica surely
	// still leads (on Clock's time): from then on the store grants and
	// renews nothing, even in a term, until it moves on. It fences a leader
	// cut off from the API server before a standby can take over
	// (docs/decisions/0190-lease-store-fences-itself.md). Nil: never fenced.
	LeadershipValidUntil func() time.Time
	// Journal, if set, receives every effect the store applies, in order
	// (effects.go): how the store's state is handed to another.
	Journal Journal
	// Follower makes a store that only applies the effects of another
	// (Store.Apply): its own decisions panic, since they would make its
	// state differ from the one it follows.
	Follower bool
	// OnLeaseEnded, if set, is told of every lease that ends before its
	// expiry: released, revoked or superseded (an expiry is not told: the
	// lease's credentials name their end). Only the store that decides
	// tells it, once the decision is made and its lock is released, in the
	// order of the effects (KindEnd); a follower applying the leader's
	// effects tells nothing, so that each end is pushed once, by the
	// replica that leads (pkg/lease/push sends it to the proxy's instance).
	// It must not block: it only enqueues.
	OnLeaseEnded func(EndedLease)
}

// fencedAt says whether a store with this configuration refuses grants
// and renewals at now (see LeadershipValidUntil).
func (c Config) fencedAt(now time.Time) bool {
	return c.LeadershipValidUntil != nil && !now.Before(c.LeadershipValidUntil())
}

// ttlFor applies the default and the bounds to a requested TTL; field
// names it in the error.
func (c Config) ttlFor(ttl time.Duration, field string) (time.Duration, error) {
	if ttl == 0 {
		return c.DefaultTTL, nil
	}
	if ttl < c.MinTTL || ttl > c.MaxTTL {
		return 0, &FieldError{Field: field, Message: fmt.Sprintf("must be between %v and %v", c.MinTTL, c.MaxTTL)}
	}
	return ttl, nil
}

// EndedLease is a lease that ended before its expiry (Config.OnLeaseEnded).
type EndedLease struct {
	// Proxy and ProxyUID name the proxy the lease held.
	Proxy    ObjectName
	ProxyUID types.UID
	// Ref names the lease, as Lease.Ref.
	Ref LeaseRef
	// ExpiresAt is when the lease would have expired: no credential of it
	// names a later end.
	ExpiresAt time.Time
	// End is how it ended: EndReleasedOK, EndReleasedBanned,
	// EndReleasedError, EndRevoked or EndSuperseded.
	End string
}

func (c Config) withDefaults() Config {
	if c.Site == nil {
		c.Site = func(domain string) string { return domain }
	}
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	orDefault(&c.DefaultTTL, DefaultTTL)
	orDefault(&c.MinTTL, DefaultMinTTL)
	orDefault(&c.MaxTTL, DefaultMaxTTL)
	orDefault(&c.MaxWait, DefaultMaxWait)
	orDefault(&c.CooldownBase, DefaultCooldownBase)
	orDefault(&c.CooldownMax, DefaultCooldownMax)
	orDefault(&c.CooldownDecay, DefaultCooldownDecay)
	orDefault(&c.SessionIdle, DefaultSessionIdle)
	orDefault(&c.SiteBanWindow, DefaultSiteBanWindow)
	if c.SiteBanProxies == 0 {
		c.SiteBanProxies = DefaultSiteBanProxies
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxCooldowns == 0 {
		c.MaxCooldowns = DefaultMaxCooldowns
	}
	if c.MaxStateBytes == 0 {
		c.MaxStateBytes = DefaultMaxStateBytes
	}
	if c.MaxStateEntries == 0 {
		c.MaxStateEntries = DefaultMaxStateEntries
	}
	if c.MaxStateBytesPerOwner == 0 {
		c.MaxStateBytesPerOwner = DefaultMaxStateBytesPerOwner
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Metrics == nil {
		c.Metrics = NoMetrics{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if len(c.Key) < MinKeyLen {
		errs = append(errs, fmt.Errorf("the lease ID key has %d bytes, want at least %d", len(c.Key), MinKeyLen))
	}
	if c.MinTTL <= 0 || c.MinTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("TTL bounds %v..%v: want 0 < min <= max", c.MinTTL, c.MaxTTL))
	}
	if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("default TTL %v is outside %v..%v", c.DefaultTTL, c.MinTTL, c.MaxTTL))
	}
	for name, d := range map[string]time.Duration{"max wait": c.MaxWait, "cool-down base": c.CooldownBase, "cool-down decay": c.CooldownDecay, "session idle": c.SessionIdle} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	if c.MaxSessions < 0 || c.MaxCooldowns < 0 || c.MaxLeasesPerOwner < 0 {
		errs = append(errs, fmt.Errorf("negative MaxSessions %d, MaxCooldowns %d or MaxLeasesPerOwner %d", c.MaxSessions, c.MaxCooldowns, c.MaxLeasesPerOwner))
	}
	if c.MaxDomainBudgets < 0 || c.MaxStateBytes < 0 || c.MaxStateEntries < 0 || c.MaxStateBytesPerOwner < 0 {
		errs = append(errs, fmt.Errorf("negative MaxDomainBudgets %d, MaxStateBytes %d, MaxStateEntries %d or MaxStateBytesPerOwner %d",
			c.MaxDomainBudgets, c.MaxStateBytes, c.MaxStateEntries, c.MaxStateBytesPerOwner))
	}
	if c.SiteBanProxies < 1 || c.SiteBanProxies > MaxSiteBanProxies || c.SiteBanWindow < 0 {
		errs = append(errs, fmt.Errorf("site bans: %d proxies within %v: want 1 to %d proxies and a positive window", c.SiteBanProxies, c.SiteBanWindow, MaxSiteBanProxies))
	}
	if c.CooldownMax < c.CooldownBase {
		errs = append(errs, fmt.Errorf("cool-down max %v is below its base %v", c.CooldownMax, c.CooldownBase))
	}
	return errors.Join(errs...)
}

// Outcome is how a holder's use of a proxy went, given at release.
type Outcome string

const (
	// OutcomeOK: the proxy worked.
	OutcomeOK Outcome = "ok"
	// OutcomeBanned: the domain banned the proxy; it cools down for that domain.
	OutcomeBanned Outcome = "banned"
	// OutcomeError: something failed, not the proxy's fault as far as the
	// holder knows; no cool-down.
	OutcomeError Outcome = "error"
)
