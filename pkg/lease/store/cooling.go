package store

import (
	"cmp"
	"slices"
	"time"
)

// Cooling is what a proxy is cooling down for: the sites (registrable
// domains, hostrule.Site) whose cool-downs are in force, the latest-ending first, at most the number
// asked for; Total counts them all.
type Cooling struct {
	Domains []DomainCooldown
	Total   int
}

// DomainCooldown is one site (every name of it) a proxy keeps away from
// until Until.
type DomainCooldown struct {
	Domain string
	Until  time.Time
}

// CoolingDown returns, for each proxy with a cool-down in force, up to
// perProxy of its domains (for the dashboard). It fails with
// ErrNotLeader on a store that does not lead: cool-downs are the
// leader's.
func (s *Store) CoolingDown(perProxy int) (map[ObjectName]Cooling, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
	if !s.leading {
		return nil, ErrNotLeader
	}
	out := map[ObjectName]Cooling{}
	for _, p := range s.proxies {
		if p.cooling == 0 {
			continue
		}
		c := Cooling{Total: p.cooling, Domains: make([]DomainCooldown, 0, min(p.cooling, perProxy))}
		for domain, cd := range p.cooldowns {
			if cd.inForce {
				c.Domains = append(c.Domains, DomainCooldown{Domain: domain, Until: cd.until})
			}
		}
		slices.SortFunc(c.Domains, func(a, b DomainCooldown) int {
			return cmp.Or(b.Until.Compare(a.Until), cmp.Compare(a.Domain, b.Domain))
		})
		c.Domains = c.Domains[:min(len(c.Domains), perProxy)]
		out[p.info.Key] = c
	}
	return out, nil
}
