package store

import (
	"context"
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

// Store is the lease store: the proxies it may lease, the leases and the
// fleet's memory around them (the policies), all in memory. It is safe for
// concurrent use. It does no I/O and starts no goroutines; an acquire that
// waits uses the caller's.
//
// Every method decides under the one lock, and every change it decides is
// an effect applied to the state (effects.go, state.go) and handed to the
// journal, if any, in order.
type Store struct {
	// Fixed at New; read without the lock.
	cfg     Config
	clock   clock.WithTicker
	signer  signer
	journal Journal
	// emit is commit as a value, made once, for the policies' confirm.
	emit func(Effect)

	// mu guards everything below: one mutex, because an acquire reads and
	// writes the proxies, the leases and most policies at once.
	mu sync.Mutex
	st *state
	// follower: the store only applies the effects of another (Apply)
	// until Promote; its lease calls answer ErrNotLeader, its feed calls
	// do nothing, and its selection and expiry panic if reached.
	follower bool
	// encoded is the journal's buffer, reused for every effect.
	encoded []byte
	// snapshotSize is the length of the last snapshot taken or restored,
	// so that the next one's buffer is allocated once (snapshot.go).
	snapshotSize int
	// writes is what every replica of the group reads (WriteFor).
	writes Version
	// ended are the early ends of leases the decision under way committed,
	// told to Config.OnLeaseEnded once the lock is released (locked).
	ended []EndedLease
}

// New returns an empty store that does not lead: it tracks proxies but
// grants nothing until Lead.
func New(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("lease store: %w", err)
	}
	s := &Store{cfg: cfg, clock: cfg.Clock, signer: newSigner(cfg.Key), journal: cfg.Journal, follower: cfg.Follower, st: newState(cfg), writes: ThisRelease}
	s.emit = s.commit
	return s, nil
}

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// commit applies an effect to the state and hands it to the journal; the
// caller holds the lock. It is how every decision changes the store.
func (s *Store) commit(e Effect) {
	if !s.writes.Reads(e.Kind()) {
		// A replica of the group would refuse it: its older form, or none
		// (version.go). Neither the log nor this state gets the newer one.
		if o, ok := e.(olderForm); ok {
			for _, older := range o.olderForm(s.writes) {
				s.commit(older)
			}
		}
		return
	}
	if s.journal != nil {
		// A renewal that keeps its lease's TTL only moves its expiry, which
		// a new leader makes up for (Promote): a replica may leave it out.
		renewal := false
		if r, ok := e.(Renew); ok {
			l := s.st.leases[r.key]
			renewal = l != nil && l.ttl == r.ttl
		}
		s.encoded = EncodeEffect(s.encoded[:0], e)
		s.journal.Append(s.encoded, renewal)
	}
	if end, ok := e.(End); ok && s.cfg.OnLeaseEnded != nil {
		// Read before apply forgets the lease. Only here, where the store
		// that decides commits, and never in Apply: a follower applying the
		// leader's effects would push the same end a second time.
		l := s.st.leases[end.key]
		s.ended = append(s.ended, EndedLease{Proxy: l.proxyKey, ProxyUID: l.proxyUID, Ref: l.key.ref(), ExpiresAt: l.expiresAt, End: end.how})
	}
	s.st.apply(e)
}

// Apply applies the effects another store decided, in their order, on a
// store made with Config.Follower: its own decisions would break the
// sameness. The journal is not told: they are the other store's.
func (s *Store) Apply(effects ...Effect) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range effects {
		s.st.apply(e)
	}
}

// locked runs decide under the lock on the state as time has made it at
// the clock's now (what expired, lapsed or ended by now is applied first),
// and seals its effects in the journal. It returns what the caller waits
// on before it answers (nil: nothing), and false on a follower, which
// decides nothing.
//
// The leases decide ended early are told to Config.OnLeaseEnded after the
// lock is released, so the callback may take its own locks, and before
// the journal has kept the effects: Upsert and Remove do not wait for
// them. A leader that loses its leadership in between may so have told an
// end the log never kept; it stops (pkg/lease/replica), and the instance
// refuses that lease's credentials early, which fails closed.
func (s *Store) locked(decide func(now time.Time)) (Pending, bool) {
	now := s.clock.Now()
	var ended []EndedLease
	defer func() { // after the Unlock below
		for _, e := range ended {
			s.cfg.OnLeaseEnded(e)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.follower {
		return nil, false
	}
	s.advance(now)
	decide(now)
	ended, s.ended = s.ended, nil
	if s.journal == nil {
		return nil, true
	}
	return s.journal.Seal(), true
}

// settle waits for a decision's effects to be kept; an error means they
// may not be (this replica may have stopped leading): the caller answers
// ErrNotLeader, and the client tries again (with the same request ID).
func settle(p Pending, ok bool) error {
	if !ok {
		return ErrNotLeader
	}
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}

// settleTimeout bounds the wait for a decision's effects to be kept.
const settleTimeout = 10 * time.Second

// Upsert adds or updates a proxy. A proxy that stops being Ready, was not
// Ready in between (ReadySince moved), or whose UID or URL changes, has its
// leases revoked; a lower MaxLeases revokes the leases in the slots it no
// longer has.
func (s *Store) Upsert(info ProxyInfo) {
	info.Labels = maps.Clone(info.Labels)
	s.locked(func(now time.Time) {
		keep := 0
		if p := s.st.proxies[info.Key]; p != nil {
			old := p.info
			if sameEffect(ProxyPut{info: old}, ProxyPut{info: info}) {
				return // nothing changed: no effect to log
			}
			if old.UID == info.UID && old.ProviderID == info.ProviderID && old.URL == info.URL && info.Ready && old.ReadySince.Equal(info.ReadySince) {
				keep = min(max(1, int(info.MaxLeases)), maxSlots)
			}
			revoke(p, keep, now, s.emit)
		}
		s.commit(ProxyPut{info: info})
	})
}

// Remove forgets a proxy and revokes its leases.
func (s *Store) Remove(key ObjectName) {
	s.locked(func(now time.Time) {
		if p := s.st.proxies[key]; p != nil {
			revoke(p, 0, now, s.emit)
			s.commit(ProxyDelete{key: key})
		}
	})
}

// revoke ends the leases of p in slots from keep on (0: all).
func revoke(p *proxyState, keep int, now time.Time, commit func(Effect)) {
	for i := keep; i < len(p.slots); i++ {
		if l := p.slots[i]; l != nil {
			commit(End{key: l.key, how: EndRevoked, at: now, tombstone: stateRevoked})
		}
	}
}

// Lead starts a term: the store grants and renews from now on. Until
// recoverUntil it grants nothing, and renewals of leases it does not know
// re-learn them from their IDs (see docs/architecture.md, "Lease failover").
// A zero horizon means unbounded; otherwise nothing is granted or renewed
// beyond it until SetHorizon moves it.
func (s *Store) Lead(recoverUntil, horizon time.Time) {
	s.locked(func(now time.Time) {
		s.commit(TermStart{epoch: max(uint64(now.UnixNano()), s.st.term.epoch+1), recoverUntil: recoverUntil,
			recovering: now.Before(recoverUntil), horizon: horizon})
	})
}

// SetHorizon lets the store grant and renew up to t (it never moves back).
func (s *Store) SetHorizon(t time.Time) {
	s.locked(func(time.Time) {
		if t.After(s.st.term.horizon) {
			s.commit(Horizon{at: t})
		}
	})
}

// Abdicate ends the term: every lease is forgotten (the next leader learns
// the live ones from their renewals). It returns the latest expiry among
// the leases that were live, zero if none.
func (s *Store) Abdicate() time.Time {
	var last time.Time
	s.locked(func(time.Time) {
		for _, l := range s.st.expiries {
			if l.state == stateLive && l.expiresAt.After(last) {
				last = l.expiresAt
			}
		}
		s.commit(TermEnd{})
	})
	return last
}

// Promote makes a follower the store that decides, from now on: it starts
// a new term, in which lease IDs carry a new epoch and nothing is to be
// recovered (the state is whole), and commits Promoted, so that no lease
// ends early and no politeness loosens because this replica's clock may be
// up to skew behind the previous leader's. A store that decides already
// only starts the new term.
func (s *Store) Promote(skew time.Duration) error {
	now := s.clock.Now()
	s.mu.Lock()
	// Not locked: what time has done is for the new term to say, once its
	// leases are extended; a lease must not expire on the way in.
	s.follower = false
	// A recovery the last leader began (a group regrouped after a lost
	// quorum) goes on to its end, and a horizon stays where it was.
	t := s.st.term
	s.commit(TermStart{epoch: max(uint64(now.UnixNano()), t.epoch+1), recoverUntil: t.recoverUntil,
		recovering: t.recovering && now.Before(t.recoverUntil), horizon: t.horizon})
	s.commit(Promoted{at: now, skew: skew})
	var p Pending
	if s.journal != nil {
		p = s.journal.Seal()
	}
	s.mu.Unlock()
	return settle(p, true)
}

// WriteFor makes the store write only what v reads (Common over the
// group's members, version.go): effects of a newer kind in their older form, snapshots
// in v's format. A replica's store writes for ThisRelease until told.
func (s *Store) WriteFor(v Version) error {
	if err := v.Validate(); err != nil {
		return err
	}
	v = Common(v)
	s.mu.Lock()
	s.writes = v
	s.mu.Unlock()
	return nil
}

// Writes is the version the store writes for.
func (s *Store) Writes() Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Fenced reports whether the store refuses grants and renewals now because
// this replica's leadership may have passed to another (see
// Config.LeadershipValidUntil). It takes no lock.
func (s *Store) Fenced() bool { return s.cfg.fencedAt(s.clock.Now()) }

// Advance applies what time has done: expiries, ended cool-downs, the end
// of recovery, idle sessions. Every operation does this first; a janitor
// calls it so that the gauges stay current when nobody calls.
func (s *Store) Advance() { s.locked(func(time.Time) {}) }

// SetCrawlPolicy applies a policy (new or changed), recounting the live
// leases its budgets hold.
func (s *Store) SetCrawlPolicy(p CrawlPolicy) {
	s.locked(func(now time.Time) {
		if old := s.st.rules.policy(p.Key); old != nil && sameEffect(PolicyPut{policy: *old}, PolicyPut{policy: p}) {
			return // nothing changed: its budgets keep their last grants
		}
		s.commit(PolicyPut{policy: p, at: now})
	})
}

// DeleteCrawlPolicy stops applying a policy.
func (s *Store) DeleteCrawlPolicy(key ObjectName) {
	s.locked(func(now time.Time) { s.commit(PolicyDelete{key: key, at: now}) })
}

// ForgetPool drops a deleted pool's counts.
func (s *Store) ForgetPool(pool ObjectName) {
	s.locked(func(time.Time) { s.commit(PoolForget{pool: pool}) })
}

// What time does to the store, decided by the one that leads: leases and
// their tombstones reach their expiry, cool-downs lapse and are forgotten,
// the recovery after a leader change ends, sessions go idle. Each is an
// effect of its own, so that a store that follows never reads a clock for
// them: it applies the leader's.

// advance applies what time has done up to now; the caller holds the lock.
func (s *Store) advance(now time.Time) {
	if s.follower {
		panic("lease store: a follower's time is its leader's to tell")
	}
	st := s.st
	for len(st.expiries) > 0 && !now.Before(st.expiries[0].expiresAt) {
		s.commit(Expire{key: st.expiries[0].key})
	}
	for e := st.cooldowns.due(now); e != nil; e = st.cooldowns.due(now) {
		s.commit(e)
	}
	if st.term.recovering && !now.Before(st.term.recoverUntil) {
		s.commit(Recovered{})
	}
	for e := st.sessions.due(now); e != nil; e = st.sessions.due(now) {
		s.commit(e)
	}
}

// nextEvent is the next time advance has something to do that may free
// capacity (an expiry, a cool-down's end, the recovery's end), zero if
// nothing is scheduled.
func nextEvent(expiries leaseHeap, cooldowns *cooldowns, t *term) time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if len(expiries) > 0 {
		earlier(expiries[0].expiresAt)
	}
	earlier(cooldowns.next())
	if t.recovering {
		earlier(t.recoverUntil)
	}
	return next
}
