package store

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Reading the store: a lease by its ID, the live leases, the Ready
// proxies, the namespace an ID names for authorization, and what the
// policies count (for the pool controller, the CrawlPolicy status writer
// and the dashboard). None of it changes anything but what time has done.

// read runs look under the lock, on the state as time has made it at now
// (on a follower, as the leader's effects made it).
func (s *Store) read(look func(now time.Time)) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.follower {
		s.advance(now)
	}
	look(now)
}

// GetAs returns a live lease of owner ("" for one acquired without an
// owner). Errors as RenewAs.
func (s *Store) GetAs(owner, id string) (Lease, error) {
	tok, err := s.signer.decodeOwned(owner, id)
	if err != nil {
		return Lease{}, err
	}
	var view Lease
	p, ok := s.locked(func(now time.Time) {
		if !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		var l *lease
		if l, err = s.find(tok, now); err == nil {
			view, tok = viewOf(l)
		}
	})
	if err == nil {
		err = settle(p, ok)
	}
	if err != nil {
		return Lease{}, err
	}
	return s.signer.withID(view, tok), nil
}

// LeaseNamespace returns the namespace of the proxy a lease ID of owner
// names, for authorization before the lease is looked up: an ID that is
// not a lease ID, and another owner's, are ErrUnknownLease before anything
// else is looked at.
func (s *Store) LeaseNamespace(owner, id string) (string, error) {
	tok, err := s.signer.decodeOwned(owner, id)
	if err != nil {
		return "", err
	}
	return tok.proxy.Namespace, nil
}

// List returns the live leases that match f, oldest grant first. It fails
// with ErrNotLeader on a store that does not lead.
func (s *Store) List(f LeaseFilter) ([]Lease, error) {
	return s.leasesWhere(func(l *lease) bool {
		return (f.Holder == "" || l.holder == f.Holder) && (f.Namespace == "" || l.proxyKey.Namespace == f.Namespace)
	}, true)
}

// SessionLeases returns owner's live leases acquired with session in scope
// (the acquire's namespace, "" for any), oldest grant first.
func (s *Store) SessionLeases(owner, scope, session string) []Lease {
	out, _ := s.leasesWhere(func(l *lease) bool {
		return l.owner == owner && l.session == session && l.sessionScope == scope
	}, false)
	return out
}

// leasesWhere is the live leases match accepts, oldest grant first, with
// their IDs signed after the lock; leading: only on a store that leads.
func (s *Store) leasesWhere(match func(*lease) bool, leading bool) ([]Lease, error) {
	var (
		out  []Lease
		toks []token
		err  error
	)
	s.read(func(time.Time) {
		if leading && (s.follower || !s.st.term.leading) {
			err = ErrNotLeader
			return
		}
		live := sortedLeases(s.st.leases, func(l *lease) bool { return l.state == stateLive && match(l) })
		out, toks = make([]Lease, len(live)), make([]token, len(live))
		for i, l := range live {
			out[i], toks[i] = viewOf(l)
		}
	})
	for i := range out {
		out[i] = s.signer.withID(out[i], toks[i])
	}
	return out, err
}

// sortedLeases is the leases match accepts, oldest grant first (then by
// key): never in map order.
func sortedLeases(leases map[leaseKey]*lease, match func(*lease) bool) []*lease {
	var out []*lease
	for _, l := range leases {
		if match(l) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b *lease) int {
		if c := a.grantedAt.Compare(b.grantedAt); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.key.epoch, b.key.epoch), cmp.Compare(a.key.serial, b.key.serial))
	})
	return out
}

// Proxies returns the Ready proxies in namespace (empty: all) that match
// sel (nil: all), sorted by namespace and name.
func (s *Store) Proxies(namespace string, sel labels.Selector) []ProxyStatus {
	if sel == nil {
		sel = labels.Everything()
	}
	var out []ProxyStatus
	s.read(func(time.Time) {
		for _, p := range s.st.proxies {
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
				ExitCountry:   p.info.ExitCountry,
			})
		}
	})
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	return out
}

// CoolingDown returns, for each proxy with a cool-down in force, up to
// perProxy of its domains (for the dashboard). It fails with
// ErrNotLeader on a store that does not lead: cool-downs are the
// leader's.
func (s *Store) CoolingDown(perProxy int) (out map[ObjectName]Cooling, err error) {
	s.read(func(time.Time) {
		if s.follower || !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		out = s.st.cooldowns.coolingDown(perProxy)
	})
	return out, err
}

// BurnByProxy returns, per Proxy name in namespace, what its current
// instance has been through, counting bans within window; proxies with
// nothing to report are left out. It fails with ErrNotLeader on a store
// that does not lead (it has seen no grant or release).
func (s *Store) BurnByProxy(namespace string, window time.Duration) (out map[string]Burn, err error) {
	s.read(func(now time.Time) {
		if s.follower || !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		out = map[string]Burn{}
		for key, b := range s.st.tally.burns {
			p := s.st.proxies[key]
			if key.Namespace != namespace || p == nil || (b.served == 0 && len(b.bannedAt) == 0) {
				continue
			}
			out[key.Name] = Burn{ProviderID: p.info.ProviderID, Served: b.served, BannedDomains: b.bannedWithin(window, now)}
		}
	})
	return out, err
}

// Demand counts the waiting and recently refused acquires that a proxy in
// namespace with labels members would have served. An acquire matches when
// its namespace is empty or namespace, and its selector matches members.
// It fails with ErrNotLeader on a store that does not lead.
func (s *Store) Demand(namespace string, members labels.Labels) (out WaitDemand, err error) {
	s.read(func(now time.Time) {
		if s.follower || !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		out = s.st.demand.of(namespace, members, now)
	})
	return out, err
}

// NotifyDemand registers f, called (without the store's lock) when an
// acquire starts waiting or is refused NoneFree, with its namespace and
// selector, so that a pool at zero members scales up at once. f must be
// quick: it runs on the acquiring goroutine.
func (s *Store) NotifyDemand(f func(namespace string, sel labels.Selector)) {
	s.st.demand.notify.Store(&f)
}

// PoolOutcomes is what the store counted for a pool's members since it was
// made (a new leader's store starts from zero: pkg/pool adds its counts to
// the status it found when it began).
func (s *Store) PoolOutcomes(pool ObjectName) (out Outcomes) {
	s.read(func(time.Time) {
		if o := s.st.tally.pools[pool]; o != nil {
			out = *o
		}
	})
	return out
}

// CrawlPolicyStats returns each rule's use of the policy, named rules by
// host, then the default ("*"), summed over its domains.
func (s *Store) CrawlPolicyStats(key ObjectName) (out []RuleStats) {
	s.read(func(time.Time) {
		p := s.st.rules.policy(key)
		if p == nil {
			return
		}
		out = s.st.rules.stats(p)
		for i := range out {
			s.st.tiers.stats(p, &out[i])
		}
	})
	return out
}

// SiteBlocks returns the sites no lease is granted for now, by namespace
// and site, each with the CrawlPolicy that governs it (for its event).
// It fails with ErrNotLeader on a store that does not lead.
func (s *Store) SiteBlocks() (out []SiteBlock, err error) {
	s.read(func(now time.Time) {
		if !s.st.term.leading {
			err = ErrNotLeader
			return
		}
		out = s.st.siteBans.blocks(s.st.rules, now)
	})
	return out, err
}

// StateUse is what the kept session state is charged against
// --lease-max-state-bytes (blobs, keys and StateEntryOverhead per entry),
// and how many blobs the store keeps.
func (s *Store) StateUse() (bytes, entries int) {
	s.read(func(time.Time) { bytes, entries = s.st.states.bytes, len(s.st.states.byKey) })
	return bytes, entries
}

// Lister lists live leases: a Store.
type Lister interface {
	List(LeaseFilter) ([]Lease, error)
}

// LeasesByProxy counts the live leases per Proxy name in namespace, for the
// pool controller's drains. It fails with ErrNotLeader on a store that does
// not lead (its counts would be meaningless).
func LeasesByProxy(s Lister, namespace string) (map[string]int, error) {
	leases, err := s.List(LeaseFilter{Namespace: namespace})
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(leases))
	for _, l := range leases {
		counts[l.Proxy.Key.Name]++
	}
	return counts, nil
}
