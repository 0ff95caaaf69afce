package store

import (
	"time"
)

// Burn accounting: what each proxy's current instance has been through,
// first-hand, for a ProxyPool's spec.recycle (pkg/pool). It counts the
// leases granted on the instance and, per domain, the latest release with
// outcome banned. Both belong to the instance, like its cool-downs: a new
// UID or a new providerID (the Proxy controller replaced the instance under
// the same name) starts from zero. Like every lease, it is soft state of
// the leader: a new leader starts counting afresh.

// maxBurnDomains bounds the banned domains remembered per instance: the
// CRD's maximum of spec.recycle.maxBannedDomains, so a member that reaches
// it is burned under any policy and more would tell nothing.
const maxBurnDomains = 100

// burn is one instance's record, kept on its proxyState.
type burn struct {
	// served is how many leases were granted on the instance.
	served int64
	// bannedAt is the latest ban per site; nil until the first ban.
	bannedAt map[string]time.Time
}

// noteBan records a ban for domain at now. When the map is full the oldest
// ban gives way: a bounded map, and the freshest evidence kept.
func (b *burn) noteBan(domain string, now time.Time) {
	if b.bannedAt == nil {
		b.bannedAt = make(map[string]time.Time, 4)
	}
	if _, ok := b.bannedAt[domain]; !ok && len(b.bannedAt) >= maxBurnDomains {
		var oldest string
		var at time.Time
		for d, t := range b.bannedAt {
			if oldest == "" || t.Before(at) {
				oldest, at = d, t
			}
		}
		delete(b.bannedAt, oldest)
	}
	b.bannedAt[domain] = now
}

// bannedWithin counts the distinct domains banned in the window ending at now.
func (b *burn) bannedWithin(window time.Duration, now time.Time) int {
	n := 0
	for _, t := range b.bannedAt {
		if now.Sub(t) <= window {
			n++
		}
	}
	return n
}

// Burn is what a proxy's current instance has been through.
type Burn struct {
	// ProviderID names the instance the counts belong to.
	ProviderID string
	// Served is how many leases were granted on it.
	Served int64
	// BannedDomains is how many distinct sites (registrable domains:
	// shop.example.com and www.example.com are one) released a lease on
	// it with outcome banned within the window asked for.
	BannedDomains int
}

// BurnByProxy returns, per Proxy name in namespace, what its current
// instance has been through, counting bans within window; proxies with
// nothing to report are left out. It fails with ErrNotLeader on a store
// that does not lead (it has seen no grant or release).
func (s *Store) BurnByProxy(namespace string, window time.Duration) (map[string]Burn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return nil, ErrNotLeader
	}
	now := s.clock.Now()
	out := map[string]Burn{}
	for key, p := range s.proxies {
		if key.Namespace != namespace || (p.burn.served == 0 && len(p.burn.bannedAt) == 0) {
			continue
		}
		out[key.Name] = Burn{ProviderID: p.info.ProviderID, Served: p.burn.served, BannedDomains: p.burn.bannedWithin(window, now)}
	}
	return out, nil
}
