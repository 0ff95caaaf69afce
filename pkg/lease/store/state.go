package store

import (
	"cmp"
	"container/heap"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// state is everything a store knows, changed only by apply, one effect at
// a time (effects.go). It keeps the fleet (the proxies and their selection
// orders), the leases (by key and by expiry) and the term; the policies
// keep the rest, each its own. A store that decides and a store that only
// follows it hold the same state after the same effects.
type state struct {
	// The fleet: every proxy the feed reported, and the Ready ones with a
	// free slot in selection order (order) and per namespace (byNamespace).
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
	// (docs/decisions/0163-release-stamped-no-earlier-than-release.md).
	lastRelease time.Time

	term term

	// The policies, each owning its state; policies lists them in the
	// order a selection asks them (the first refusal counts).
	rules     *rules
	tiers     *tiers
	cooldowns *cooldowns
	budgets   *budgets
	tally     *tally
	requests  *requests
	demand    *demand
	sessions  *sessions
	states    *sessionStates
	siteBans  *siteBans
	policies  []policy

	metrics Metrics
	// wake tells waiting acquires that capacity may have appeared. Not
	// state: this replica's waiters.
	wake wakeup
}

// term is the leader's term: whether it leads, the epoch that names the
// term and the serial that numbers its grants, the recovery after a leader
// change (no grants until recoverUntil, see Store.Lead), and the horizon no
// lease is granted or renewed beyond, unless unbounded.
type term struct {
	leading      bool
	epoch        uint64
	serial       uint64
	recoverUntil time.Time
	recovering   bool
	horizon      time.Time
	unbounded    bool
}

// mayRelearn: an ID this store does not know is trusted only while
// recovering, only from an earlier term, and only until its expiry.
func (t *term) mayRelearn(tok token, now time.Time) bool {
	return t.recovering && tok.key.epoch < t.epoch && now.Before(tok.expiresAt)
}

// grants says whether the term grants and renews at now: it leads and
// cfg's fence has not closed (Config.LeadershipValidUntil).
func (t *term) grants(cfg Config, now time.Time) error {
	if !t.leading || cfg.fencedAt(now) {
		return ErrNotLeader
	}
	return nil
}

// allows says whether a lease may expire at expiresAt within the horizon.
func (t *term) allows(expiresAt time.Time) error {
	if !t.unbounded && expiresAt.After(t.horizon) {
		return &HorizonError{Need: expiresAt}
	}
	return nil
}

func newState(cfg Config) *state {
	st := &state{
		proxies:     map[ObjectName]*proxyState{},
		order:       &selectionOrder{},
		byNamespace: map[string]*selectionOrder{},
		leases:      map[leaseKey]*lease{},
		owned:       map[string]int{},
		rules:       newRules(cfg),
		cooldowns:   newCooldowns(cfg),
		tally:       newTally(cfg.Metrics),
		requests:    &requests{byID: map[requestKey]leaseKey{}},
		demand:      &demand{},
		sessions:    newSessions(cfg),
		states:      newSessionStates(cfg),
		metrics:     cfg.Metrics,
		wake:        wakeup{changed: make(chan struct{})},
	}
	st.tiers = newTiers(st.rules, cfg.Metrics)
	st.budgets = newBudgets(st.rules, cfg.Metrics)
	st.siteBans = newSiteBans(cfg.SiteBanProxies, cfg.SiteBanWindow, st.tiers, cfg.Metrics, cfg.Site)
	st.tiers.sites = st.siteBans
	st.policies = []policy{st.tiers, st.siteBans, st.cooldowns, st.budgets, st.tally, st.requests, st.demand, st.sessions, st.states}
	return st
}

// apply carries out one effect: the one place the state changes.
func (st *state) apply(e Effect) {
	switch e := e.(type) {
	case ProxyPut:
		st.putProxy(e.info)
	case ProxyDelete:
		st.deleteProxy(e.key)
	case Grant:
		st.term.serial = max(st.term.serial, e.lease.key.serial)
		l := leaseOf(e.lease)
		l.requestID = e.requestID
		st.install(l, install{grant: true, tier: e.tier, at: e.lease.grantedAt})
	case Relearn:
		st.install(leaseOf(e.lease), install{at: e.at})
	case Join:
		l := st.leases[e.key]
		l.expiresAt, l.ttl = e.expiresAt, e.ttl
		heap.Fix(&st.expiries, l.index)
		st.sessions.use(sessionKey{l.owner, l.sessionScope, l.session}, l.proxyKey, e.at)
		st.states.touch(l)
	case Renew:
		l := st.leases[e.key]
		l.expiresAt, l.ttl = e.expiresAt, e.ttl
		heap.Fix(&st.expiries, l.index)
		st.sessions.renewed(l, e.at)
	case End:
		st.end(st.leases[e.key], e.how, e.at, e.tombstone)
	case Expire:
		if l := st.leases[e.key]; l.state == stateLive {
			st.end(l, EndExpired, l.expiresAt, stateLive)
		} else {
			heap.Remove(&st.expiries, l.index)
			delete(st.leases, e.key)
		}
	case Tombstone:
		if l := st.leases[e.lease.key]; l != nil {
			l.state = e.state
			return
		}
		l := &lease{key: e.lease.key, state: e.state, proxyKey: e.lease.proxy, proxyUID: e.lease.proxyUID, slot: e.lease.slot, expiresAt: e.lease.expiresAt}
		st.leases[l.key] = l
		heap.Push(&st.expiries, l)
	case OutcomeCount:
		// For the pool of the proxy leased (when it is still that Proxy
		// and a member of one), for the rule of the domain and its tier.
		p := proxyOf(st.proxies, e.proxy, e.uid)
		if l := st.leases[e.lease]; l != nil && l.state == stateLive {
			l.reportedOK, l.reportedBytes = l.reportedOK+e.n, l.reportedBytes+e.bytes
		}
		outcome := cmp.Or(e.outcome, OutcomeOK)
		st.tally.count(p, outcome, e.n, e.bytes)
		if p != nil && e.domain != "" && e.n > 0 {
			st.rules.countOutcome(p.info.Key.Namespace, e.domain, outcome, e.n)
			st.tiers.observe(p, outcome, e.domain, e.n, e.at)
		}
	case Ban:
		if p := proxyOf(st.proxies, e.proxy, e.uid); p != nil {
			// A site bans, not a host name: its bans on any of its names
			// are one cool-down, one burned domain and one site's count.
			site := st.siteBans.siteOf(e.domain)
			st.cooldowns.ban(cooldownKey{proxy: e.proxy, domain: site}, e.at)
			st.tally.burnOf(e.proxy).noteBan(site, e.at)
			st.siteBans.banned(p, site, e.domain, e.at)
			st.states.drop(e.owner, p, e.domain) // the site knows this IP: start afresh
			st.wake.broadcast()
		}
	case CooldownLapse:
		st.cooldowns.lapse(e.key)
		st.wake.broadcast()
	case CooldownDrop:
		st.cooldowns.drop(e.key)
	case SessionDrop:
		st.sessions.drop(e.key)
	case StatePut:
		st.states.put(e.key, e.blob)
	case PolicyPut:
		old := st.rules.put(&e.policy)
		st.rechargePolicy(e.policy.Key.Namespace, old, &e.policy, e.at)
	case PolicyDelete:
		old := st.rules.delete(e.key)
		st.rechargePolicy(e.key.Namespace, old, nil, e.at)
	case BudgetEvict:
		st.budgets.evict(e.key)
	case PoliteNote:
		st.rules.notePolite(e.rule, e.refused)
	case Refusal:
		st.demand.refused(e)
	case PoolForget:
		delete(st.tally.pools, e.pool)
	case TermStart:
		st.term = term{leading: true, epoch: e.epoch, recoverUntil: e.recoverUntil, recovering: e.recovering,
			horizon: e.horizon, unbounded: e.horizon.IsZero()}
		st.metrics.SetRecovering(e.recovering)
		st.wake.broadcast()
	case TermEnd:
		st.endTerm()
	case Horizon:
		st.term.horizon = e.at
	case Recovered:
		st.term.recovering = false
		st.metrics.SetRecovering(false)
		st.wake.broadcast()
	case Promoted:
		for _, l := range sortedLeases(st.leases, func(l *lease) bool { return l.state == stateLive }) {
			l.expiresAt = later(l.expiresAt, e.at.Add(l.ttl+e.skew))
			st.sessions.renewed(l, e.at)
		}
		heap.Init(&st.expiries)
		for _, pol := range st.policies {
			pol.promoted(e.skew)
		}
	}
}

// proxyOf is the proxy key if it is still the one of UID uid (not a new
// Proxy of the same name), else nil.
func proxyOf(proxies map[ObjectName]*proxyState, key ObjectName, uid types.UID) *proxyState {
	if p := proxies[key]; p != nil && p.info.UID == uid {
		return p
	}
	return nil
}

// putProxy sets a proxy's info (KindProxyPut). Another UID under the same
// name is another Proxy: nothing carries over; another ProviderID is a new
// instance (a new IP) whose predecessor's bans and burn were its own. The
// leases the change revokes ended before (KindEnd); the slots beyond its
// capacity are empty now and go.
func (st *state) putProxy(info ProxyInfo) {
	p := st.proxies[info.Key]
	if p == nil {
		p = &proxyState{info: info, urlHash: urlHash(info.URL), isReady: info.Ready}
		st.proxies[info.Key] = p
		if info.Ready {
			st.relist(p, false)
			st.wake.broadcast()
		}
		return
	}
	old, wasReleased := p.info, p.lastReleased
	switch {
	case old.UID != info.UID:
		forget(st.policies, info.Key, false)
		p.lastReleased = time.Time{}
	case old.ProviderID != info.ProviderID:
		forget(st.policies, info.Key, true)
	}
	if capacity := min(max(1, int(info.MaxLeases)), maxSlots); len(p.slots) > capacity {
		p.slots = p.slots[:capacity]
	}
	p.info, p.urlHash, p.isReady = info, urlHash(info.URL), info.Ready
	// Its place moves with its latency, and with a new Proxy's forgotten release.
	st.relist(p, old.LatencyMillis != info.LatencyMillis || !wasReleased.Equal(p.lastReleased))
	if info.Ready {
		// New capacity, labels or a new place in the order may satisfy a waiter.
		st.wake.broadcast()
	}
}

// deleteProxy forgets a proxy (KindProxyDelete); its leases ended before.
func (st *state) deleteProxy(key ObjectName) {
	p := st.proxies[key]
	if p == nil {
		return
	}
	p.isReady = false
	st.relist(p, false)
	forget(st.policies, key, false)
	delete(st.proxies, key)
}

// forget tells every policy that a proxy, or only its instance, is gone.
func forget(policies []policy, key ObjectName, instance bool) {
	for _, pol := range policies {
		pol.forget(key, instance)
	}
}

// install makes l live on its proxy's slot, as how says.
func (st *state) install(l *lease, how install) {
	l.proxy = st.proxies[l.proxyKey]
	l.proxy.occupy(l)
	st.relist(l.proxy, false)
	st.leases[l.key] = l
	heap.Push(&st.expiries, l)
	st.live++
	if l.owner != "" {
		st.owned[l.owner]++
	}
	for _, pol := range st.policies {
		pol.installed(l, how)
	}
	st.metrics.SetActiveLeases(st.live)
}

// end ends a live lease, taking it off its proxy; tombstone is the state
// its ID keeps until its expiry, stateLive for none (the lease is forgotten).
func (st *state) end(l *lease, how string, at time.Time, tombstone leaseState) {
	p := l.proxy
	p.slots[l.slot] = nil
	p.held--
	l.proxy = nil
	for _, pol := range st.policies {
		pol.ended(l)
	}
	st.live--
	if l.owner != "" {
		if st.owned[l.owner]--; st.owned[l.owner] <= 0 {
			delete(st.owned, l.owner)
		}
	}
	st.metrics.SetActiveLeases(st.live)
	st.metrics.ObserveLeaseEnd(how, at.Sub(l.grantedAt))
	released := how != EndRevoked && how != EndSuperseded
	if released {
		p.lastReleased = at
	}
	if how == EndReleasedOK || how == EndReleasedBanned || how == EndReleasedError {
		st.lastRelease = at
	}
	st.relist(p, released)
	st.wake.broadcast()
	if tombstone == stateLive {
		heap.Remove(&st.expiries, l.index)
		delete(st.leases, l.key)
		return
	}
	l.state = tombstone
}

// relist keeps p in the selection orders exactly while it is Ready with a
// free slot; moved: its place may have changed (a release, a new latency)
// and is found again.
func (st *state) relist(p *proxyState, moved bool) {
	want := p.isReady && p.free()
	listed := p.listed()
	if listed && (!want || moved) {
		st.order.remove(p)
		st.byNamespace[p.info.Key.Namespace].remove(p)
		listed = false
	}
	if want && !listed {
		st.order.insert(p)
		ns := st.byNamespace[p.info.Key.Namespace]
		if ns == nil {
			// A namespace's order, even empty, stays: its proxies come back
			// at their next release, and a new order for each would be an
			// allocation a grant.
			ns = &selectionOrder{byNamespace: true}
			st.byNamespace[p.info.Key.Namespace] = ns
		}
		ns.insert(p)
	}
}

// rechargePolicy follows a change of a namespace's policies at the time
// at: its live leases are charged to the budgets the policies name now,
// the shares of per-domain budgets are recounted, and the tier states of
// rules whose tiers changed are dropped.
func (st *state) rechargePolicy(namespace string, old, new *CrawlPolicy, at time.Time) {
	st.budgets.recharge(namespace, func(charge func(*lease)) {
		for _, l := range sortedLeases(st.leases, func(l *lease) bool { return l.state == stateLive }) {
			charge(l)
		}
	})
	st.budgets.reshare(at)
	st.tiers.retier(old, new)
}

// endTerm ends the term (KindTermEnd): every lease is forgotten (the next
// leader learns the live ones from their renewals), and what the policies
// counted of them.
func (st *state) endTerm() {
	for _, p := range st.proxies {
		clear(p.slots)
		p.slots, p.held = p.slots[:0], 0
		st.relist(p, false)
	}
	st.leases = map[leaseKey]*lease{}
	st.expiries = nil
	st.live = 0
	clear(st.owned)
	for _, pol := range st.policies {
		pol.termEnded()
	}
	st.metrics.SetActiveLeases(0)
	st.term.leading, st.term.recovering = false, false
	st.metrics.SetRecovering(false)
	st.wake.broadcast()
}

// wakeup wakes the acquires waiting for capacity: changed is closed (and
// replaced) when capacity may have appeared; waiting counts the waiters,
// so that nobody pays for a channel when nobody waits.
type wakeup struct {
	changed chan struct{}
	waiting int
}

func (w *wakeup) broadcast() {
	if w.waiting > 0 {
		close(w.changed)
		w.changed = make(chan struct{})
	}
}
