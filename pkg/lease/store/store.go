package store

import (
	"container/list"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// ObjectName names a namespaced object, a Proxy or a CrawlPolicy. It has
// the fields of client-go's cache.ObjectName and converts to and from it
// (store.ObjectName(cache.MetaObjectToName(p))); the store has its own so
// that it imports no client-go.
type ObjectName struct {
	Namespace string
	Name      string
}

// String is namespace/name, or the name alone without a namespace, as
// cache.ObjectName writes it.
func (n ObjectName) String() string {
	if n.Namespace == "" {
		return n.Name
	}
	return n.Namespace + "/" + n.Name
}

// ProxyInfo is what the store knows of a Proxy; the feed derives it from
// the Proxy object (pkg/lease/feed.ProxyInfoFrom).
type ProxyInfo struct {
	Key ObjectName
	// UID tells a recreated Proxy of the same name from its predecessor.
	UID types.UID
	// ProviderID names the instance (status.providerID): a new one under
	// the same Proxy is a new IP, and starts without cool-downs or burn.
	ProviderID string
	// Ready: status.phase is Ready and the proxy has an address.
	Ready bool
	// URL is how crawlers reach the proxy: scheme://ip:port.
	URL    string
	Labels map[string]string
	// Pool is the ProxyPool the proxy is a member of (its pool label), ""
	// if none: leases say it.
	Pool          string
	LatencyMillis int64
	// MaxLeases is how many leases may hold the proxy at once (below 1 means 1).
	MaxLeases int32
	// ReadySince is when the proxy last became Ready. It comes from the
	// object (condition transition times), so every replica sees the same
	// value: a change while Ready means the proxy was not Ready in between,
	// even if this replica never saw that state, and revokes its leases.
	ReadySince time.Time
	// Draining: its ProxyPool is taking it out. It is granted no new lease;
	// its live leases keep renewing until they end, so that a crawler is
	// not cut off mid-job.
	Draining bool
	// CredentialsSecret names the Secret of the proxy's basic-auth
	// credentials (proxyaccess.CredentialsSecret), "" when it takes none: a
	// grant reads the Secret by this name, without looking the Proxy up.
	CredentialsSecret string
	// ExitCountry is the ISO 3166-1 alpha-2 country (upper case) the proxy
	// leaves from, "" if unknown: an acquire naming a country gets only
	// proxies of that country (AcquireRequest.Country).
	ExitCountry string
}

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
	proxyKey ObjectName
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
	// budget is the crawl policy budget the live lease is charged to, nil
	// for none (politeness.go).
	budget *budget
	// readySince is the proxy's ReadySince at the grant.
	readySince time.Time
	index      int // in leaseHeap
}

// sessionKey names a sticky session: the identity that acquired with it
// (AcquireRequest.Owner), the acquire's namespace, and the session name. A
// name is chosen by the client, so another identity using the same one has
// a session of its own: it neither follows nor moves the first one's
// (docs/decisions/0220-gateway-session-belongs-to-its-caller.md).
type sessionKey struct {
	owner     string
	namespace string
	session   string
}

type session struct {
	key      sessionKey
	proxy    ObjectName
	lastUsed time.Time
	elem     *list.Element // in Store.sessionLRU
}

// Store is the lease store: the proxies it may lease, the leases, cool-downs
// and sticky sessions, all in memory. It is safe for concurrent use. It does
// no I/O and starts no goroutines; an acquire that waits uses the caller's.
type Store struct {
	// Fixed at New; read without the lock.
	cfg     Config
	clock   clock.WithTicker
	signer  signer
	metrics Metrics

	// mu guards everything below. One mutex, because an acquire reads and
	// writes every group at once; the groups say what each field is for.
	mu sync.Mutex

	// The fleet: every proxy the feed reported, and the Ready ones in
	// selection order (order), and per namespace (byNamespace).
	proxies     map[ObjectName]*proxyState
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

	// The crawl policies and their budgets (politeness.go).
	polite politeness
	// poolOutcomes count releases per pool (outcomes.go); bounded by the
	// pools that exist, ForgetPool drops a deleted one's.
	poolOutcomes map[ObjectName]*Outcomes
	// Session state blobs by (identity, proxy, domain) (sessionstate.go).
	states sessionStates
	// The sites that banned the most proxies lately (sitebans.go).
	siteBans siteBans

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

// New returns an empty store that does not lead: it tracks proxies but
// grants nothing until Lead.
func New(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("lease store: %w", err)
	}
	return &Store{
		cfg:          cfg,
		clock:        cfg.Clock,
		signer:       newSigner(cfg.Key),
		metrics:      cfg.Metrics,
		proxies:      map[ObjectName]*proxyState{},
		order:        &selectionOrder{},
		byNamespace:  map[string]*selectionOrder{},
		leases:       map[leaseKey]*lease{},
		sessions:     map[sessionKey]*session{},
		sessionLRU:   list.New(),
		owned:        map[string]int{},
		changed:      make(chan struct{}),
		polite:       newPoliteness(cfg.MaxDomainBudgets),
		poolOutcomes: map[ObjectName]*Outcomes{},
		states:       newSessionStates(cfg),
		siteBans:     newSiteBans(cfg.SiteBanProxies, cfg.SiteBanWindow),
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
func (s *Store) Remove(key ObjectName) {
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
	s.forgetBudgetsLocked()
	s.forgetTiersLocked()
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

// Fenced reports whether the store refuses grants and renewals now because
// this replica's leadership may have passed to another (see
// Config.LeadershipValidUntil). It takes no lock.
func (s *Store) Fenced() bool { return s.fencedAt(s.clock.Now()) }

func (s *Store) fencedAt(now time.Time) bool {
	return s.cfg.LeadershipValidUntil != nil && !now.Before(s.cfg.LeadershipValidUntil())
}

// grantingLocked reports whether the store may grant or renew at now: it is
// in a term and not fenced.
func (s *Store) grantingLocked(now time.Time) bool { return s.leading && !s.fencedAt(now) }

// Advance applies what time has done: expiries, ended cool-downs, the end
// of recovery. Every operation does this first; a janitor calls it so that
// the gauges stay current when nobody calls.
func (s *Store) Advance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
}
