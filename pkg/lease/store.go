package lease

import (
	"container/heap"
	"container/list"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

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

// ProxyInfo is what the store knows of a Proxy; the feed derives it from
// the Proxy object (see ProxyInfoFrom).
type ProxyInfo struct {
	Key cache.ObjectName
	// UID tells a recreated Proxy of the same name from its predecessor.
	UID types.UID
	// ProviderID names the instance (status.providerID): a new one under
	// the same Proxy is a new IP, and starts without cool-downs or burn.
	ProviderID string
	// Ready: status.phase is Ready and the proxy has an address.
	Ready bool
	// URL is how crawlers reach the proxy: scheme://ip:port.
	URL           string
	Labels        map[string]string
	LatencyMillis int64
	// MaxLeases is how many leases may hold the proxy at once (below 1 means 1).
	MaxLeases int32
	// ReadySince is when the proxy last became Ready. It comes from the
	// object (condition transition times), so every replica sees the same
	// value: a change while Ready means the proxy was not Ready in between,
	// even if this replica never saw that state, and revokes its leases.
	ReadySince time.Time
	// Draining: its ProxyPool is taking it out. It is granted no new lease;
	// its live leases keep renewing until they end (see drain.go).
	Draining bool
	// CredentialsSecret names the Secret of the proxy's basic-auth
	// credentials (proxyaccess.CredentialsSecret), "" when it takes none: a
	// grant reads the Secret by this name, without looking the Proxy up.
	CredentialsSecret string
}

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
	// cannot grow the leader without limit (see bounded.go for what is
	// evicted). Zero takes the defaults.
	MaxSessions, MaxCooldowns int
	// MaxLeasesPerOwner caps the live leases one authenticated identity
	// holds (AcquireRequest.Owner); 0: no cap. Leases without an owner
	// (in-process callers) are not capped.
	MaxLeasesPerOwner int
	// Metrics receives measurements. Default: none.
	Metrics Metrics
}

func (c Config) withDefaults() Config {
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
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxCooldowns == 0 {
		c.MaxCooldowns = DefaultMaxCooldowns
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

type leaseState int

const (
	stateLive leaseState = iota
	// Tombstones stay until the lease's expiry so that its ID gets a
	// precise answer: revoked (410), superseded (409), or released (404,
	// kept only for leases re-learned from a previous leader, whose IDs
	// could otherwise be re-learned again).
	stateRevoked
	stateSuperseded
	stateReleased
)

type lease struct {
	key   leaseKey
	state leaseState
	// proxy is set while the lease is live.
	proxy    *proxyState
	proxyKey cache.ObjectName
	proxyUID types.UID
	slot     int32
	holder   string
	// owner is the identity that acquired it: only it may renew, release or read it.
	owner   string
	session string
	// sessionScope is the namespace of the acquire: sessions are per namespace.
	sessionScope string
	domain       string
	grantedAt    time.Time
	expiresAt    time.Time
	ttl          time.Duration
	urlHash      uint64
	// readySince is the proxy's ReadySince at the grant.
	readySince time.Time
	index      int // in leaseHeap
}

type proxyState struct {
	info ProxyInfo
	// urlHash is urlHash(info.URL), kept so that no grant hashes the URL.
	urlHash uint64
	// slots[i] is the live lease in slot i, or nil; len(slots) grows up to capacity.
	slots        []*lease
	held         int
	lastReleased time.Time
	// cooldowns by domain; cooling counts those in force.
	cooldowns map[string]*cooldown
	cooling   int
	// burn is the instance's lease and ban record (burn.go).
	burn burn
	// isReady: the feed reported it Ready. Its places in the selection
	// orders, in them exactly while it is Ready with a free slot (see
	// relistLocked).
	isReady           bool
	allLinks, nsLinks orderLinks
}

func (p *proxyState) capacity() int { return min(max(1, int(p.info.MaxLeases)), maxSlots) }
func (p *proxyState) free() bool    { return p.held < p.capacity() }
func (p *proxyState) ready() bool   { return p.isReady }
func (p *proxyState) listed() bool  { return p.allLinks.in }

func (p *proxyState) freeSlot() int32 {
	for i, l := range p.slots {
		if l == nil {
			return int32(i)
		}
	}
	return int32(len(p.slots))
}

func (p *proxyState) occupant(slot int32) *lease {
	if int(slot) < len(p.slots) {
		return p.slots[slot]
	}
	return nil
}

func (p *proxyState) occupy(l *lease) {
	for int(l.slot) >= len(p.slots) {
		p.slots = append(p.slots, nil)
	}
	p.slots[l.slot] = l
	p.held++
}

// coolingFor returns the cool-down in force for domain, if any.
func (p *proxyState) coolingFor(domain string) *cooldown {
	if domain == "" || p.cooling == 0 {
		return nil
	}
	if c := p.cooldowns[domain]; c != nil && c.inForce {
		return c
	}
	return nil
}

// selectedBefore is the selection order: least recently released first
// (an expiry counts as a release; never released counts as oldest), then
// lower latency, then the name, so that the order is total and stable.
func selectedBefore(a, b *proxyState) bool {
	if !a.lastReleased.Equal(b.lastReleased) {
		return a.lastReleased.Before(b.lastReleased)
	}
	if a.info.LatencyMillis != b.info.LatencyMillis {
		return a.info.LatencyMillis < b.info.LatencyMillis
	}
	if a.info.Key.Namespace != b.info.Key.Namespace {
		return a.info.Key.Namespace < b.info.Key.Namespace
	}
	return a.info.Key.Name < b.info.Key.Name
}

type sessionKey struct {
	namespace string
	session   string
}

type session struct {
	key      sessionKey
	proxy    cache.ObjectName
	lastUsed time.Time
	elem     *list.Element // in Store.sessionLRU
}

// Store is the lease store: the proxies it may lease, the leases, cool-downs
// and sticky sessions, all in memory. It is safe for concurrent use. It does
// no I/O and starts no goroutines; an acquire that waits uses the caller's.
type Store struct {
	// Fixed at NewStore; read without the lock.
	cfg     Config
	clock   clock.WithTicker
	signer  signer
	metrics Metrics

	// mu guards everything below. One mutex, because an acquire reads and
	// writes every group at once; the groups say what each field is for.
	mu sync.Mutex

	// The fleet: every proxy the feed reported, and the Ready ones in
	// selection order (order), and per namespace (byNamespace).
	proxies     map[cache.ObjectName]*proxyState
	order       *selectionOrder
	byNamespace map[string]*selectionOrder

	// The leases: live ones and tombstones by key, all by expiry, how many
	// are live, and how many each owner holds (for MaxLeasesPerOwner).
	leases   map[leaseKey]*lease
	expiries leaseHeap
	live     int
	owned    map[string]int
	// lastRelease is the latest time a holder's release was stamped with
	// (see releaseLiveLocked).
	lastRelease time.Time

	// Cool-downs: every (proxy, domain) entry by its next event (the
	// entries themselves hang off their proxies), and how many are in force.
	cooldowns cooldownHeap
	inForce   int

	// Sticky sessions, and their order, most recently used first.
	sessions   map[sessionKey]*session
	sessionLRU *list.List

	// Waiting acquires: changed is closed (and replaced) when capacity may
	// have appeared; waiting counts the waiters, so that nobody pays for a
	// channel when nobody waits.
	changed chan struct{}
	waiting int

	// What pools' autoscalers count: waiters and recent refusals (demand.go).
	demand demandState

	// The term: whether it leads, the epoch that names the term and the
	// serial that numbers its grants, the recovery after a leader change
	// (no grants before recoverUntil, see Lead), and the horizon no lease
	// is granted or renewed beyond, unless unbounded.
	leading      bool
	epoch        uint64
	serial       uint64
	recoverUntil time.Time
	recovering   bool
	horizon      time.Time
	unbounded    bool
}

// NewStore returns an empty store that does not lead: it tracks proxies but
// grants nothing until Lead.
func NewStore(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("lease store: %w", err)
	}
	return &Store{
		cfg:         cfg,
		clock:       cfg.Clock,
		signer:      newSigner(cfg.Key),
		metrics:     cfg.Metrics,
		proxies:     map[cache.ObjectName]*proxyState{},
		order:       &selectionOrder{},
		byNamespace: map[string]*selectionOrder{},
		leases:      map[leaseKey]*lease{},
		sessions:    map[sessionKey]*session{},
		sessionLRU:  list.New(),
		owned:       map[string]int{},
		changed:     make(chan struct{}),
	}, nil
}

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Upsert adds or updates a proxy. A proxy that stops being Ready, was not
// Ready in between (ReadySince moved), or whose UID or URL changes, has its
// leases revoked; a lower MaxLeases revokes the leases in the slots it no
// longer has.
func (s *Store) Upsert(info ProxyInfo) {
	info.Labels = maps.Clone(info.Labels)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)

	p := s.proxies[info.Key]
	if p == nil {
		p = &proxyState{info: info, urlHash: urlHash(info.URL), isReady: info.Ready}
		s.proxies[info.Key] = p
		if info.Ready {
			s.relistLocked(p, false)
			s.broadcastLocked()
		}
		return
	}
	old := p.info
	switch {
	case old.UID != info.UID:
		// Another Proxy object under the same name: nothing carries over.
		s.revokeLocked(p, 0, now)
		s.forgetCooldownsLocked(p)
		p.lastReleased = time.Time{}
		p.burn = burn{}
	case old.ProviderID != info.ProviderID:
		// A new instance of the same Proxy (a new IP): the bans were the
		// old instance's.
		s.revokeLocked(p, 0, now)
		s.forgetCooldownsLocked(p)
		p.burn = burn{}
	case old.URL != info.URL || !info.Ready || !old.ReadySince.Equal(info.ReadySince):
		s.revokeLocked(p, 0, now)
	default:
		s.revokeLocked(p, min(max(1, int(info.MaxLeases)), maxSlots), now)
	}
	p.info, p.urlHash, p.isReady = info, urlHash(info.URL), info.Ready
	s.relistLocked(p, old.LatencyMillis != info.LatencyMillis)
	if info.Ready {
		// New capacity, labels or a new place in the order may satisfy a waiter.
		s.broadcastLocked()
	}
}

// Remove forgets a proxy and revokes its leases.
func (s *Store) Remove(key cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)
	p := s.proxies[key]
	if p == nil {
		return
	}
	s.revokeLocked(p, 0, now)
	p.isReady = false
	s.relistLocked(p, false)
	s.forgetCooldownsLocked(p)
	delete(s.proxies, key)
}

// Lead starts a term: the store grants and renews from now on. Until
// recoverUntil it grants nothing, and renewals of leases it does not know
// re-learn them from their IDs (see docs/architecture.md, "Lease failover").
// A zero horizon means unbounded; otherwise nothing is granted or renewed
// beyond it until SetHorizon moves it.
func (s *Store) Lead(recoverUntil, horizon time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.leading = true
	s.epoch = max(uint64(now.UnixNano()), s.epoch+1)
	s.serial = 0
	s.recoverUntil = recoverUntil
	s.recovering = now.Before(recoverUntil)
	s.metrics.SetRecovering(s.recovering)
	s.horizon, s.unbounded = horizon, horizon.IsZero()
	s.broadcastLocked()
}

// SetHorizon lets the store grant and renew up to t (it never moves back).
func (s *Store) SetHorizon(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.After(s.horizon) {
		s.horizon = t
	}
}

// Abdicate ends the term: every lease is forgotten (the next leader learns
// the live ones from their renewals). It returns the latest expiry among
// the leases that were live, zero if none.
func (s *Store) Abdicate() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
	var last time.Time
	for _, l := range s.expiries {
		if l.state == stateLive && l.expiresAt.After(last) {
			last = l.expiresAt
		}
	}
	for _, p := range s.proxies {
		clear(p.slots)
		p.slots, p.held = p.slots[:0], 0
		s.relistLocked(p, false)
	}
	s.leases = map[leaseKey]*lease{}
	s.expiries = nil
	s.live = 0
	clear(s.owned)
	s.metrics.SetActiveLeases(0)
	s.leading, s.recovering = false, false
	s.metrics.SetRecovering(false)
	s.broadcastLocked()
	return last
}

// Leading reports whether the store is in a term.
func (s *Store) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// Advance applies what time has done: expiries, ended cool-downs, the end
// of recovery. Every operation does this first; a janitor calls it so that
// the gauges stay current when nobody calls.
func (s *Store) Advance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
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

// installLocked makes l live on its proxy's slot.
func (s *Store) installLocked(l *lease) {
	l.proxy.occupy(l)
	s.relistLocked(l.proxy, false)
	s.leases[l.key] = l
	heap.Push(&s.expiries, l)
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

// endLocked ends a live lease; tombstone stateLive means no tombstone.
func (s *Store) endLocked(l *lease, end string, now time.Time, tombstone leaseState) {
	s.freeLocked(l, end, now)
	if tombstone == stateLive {
		heap.Remove(&s.expiries, l.index)
		delete(s.leases, l.key)
		return
	}
	l.state = tombstone
}

// freeLocked takes a live lease off its proxy.
func (s *Store) freeLocked(l *lease, end string, at time.Time) {
	p := l.proxy
	p.slots[l.slot] = nil
	p.held--
	l.proxy = nil
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

// viewOfLocked is a live lease as callers see it, but for its ID, and the
// token its ID encodes: sign it (withID) once the store is unlocked.
func viewOfLocked(l *lease) (Lease, token) {
	return Lease{
			Holder: l.holder,
			Owner:  l.owner,
			Proxy: LeasedProxy{
				Key: l.proxyKey, URL: l.proxy.info.URL, LatencyMillis: l.proxy.info.LatencyMillis,
				CredentialsSecret: l.proxy.info.CredentialsSecret,
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

// leaseHeap orders leases (live and tombstones) by expiry.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
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
