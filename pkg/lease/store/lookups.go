package store

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Reading the store: a lease by its ID, the live leases, the Ready
// proxies, and the namespace an ID names for authorization.

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

// LeaseNamespace returns the namespace of the proxy a lease ID of owner
// names, for authorization before the lease is looked up: an ID that is
// not a lease ID, and another owner's, are ErrUnknownLease before anything
// else is looked at.
func (s *Store) LeaseNamespace(owner, id string) (string, error) {
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
			ExitCountry:   p.info.ExitCountry,
		})
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	return out
}

// LeasesByProxy counts the live leases per Proxy name in namespace, for the
// pool controller's drains. It fails with ErrNotLeader on a store that does
// not lead (its counts would be meaningless).
func (s *Store) LeasesByProxy(namespace string) (map[string]int, error) {
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
