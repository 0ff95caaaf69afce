package store

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// The Store's side of the site-ban policy (sitebans.go): the two places it
// is asked, a release with outcome banned (noteSiteBanLocked) and the
// acquire (escalateBlockedTierLocked, then siteCheck in the selection),
// and the blocks for the CrawlPolicy status writer.

// noteSiteBanLocked tells the policy that domain's site banned p.
func (s *Store) noteSiteBanLocked(p *proxyState, site, domain string, now time.Time) {
	tier := s.proxyTierLocked(p, s.tieringOfLocked(p.info.Key.Namespace, domain))
	_, evicted := s.siteBans.noteBan(p.info.Key.Namespace, site, domain, p.info.Key, p.info.ProviderID, tier, now)
	s.setStateEntries(StateSiteBans, s.siteBans.entries)
	if evicted {
		s.observeEviction(StateSiteBans)
	}
}

// tieringOfLocked is the tiering of the rule that governs domain in ns,
// nil for none.
func (s *Store) tieringOfLocked(ns, domain string) *Tiering {
	t, _ := s.tieringLocked(ns, domain)
	return t
}

// proxyTierLocked is the index of the first of t's tiers p is on, -1 when
// t is nil or p is on none.
func (s *Store) proxyTierLocked(p *proxyState, t *Tiering) int {
	if t == nil {
		return -1
	}
	return slices.IndexFunc(t.Selectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(p.info.Labels)) })
}

// escalateBlockedTierLocked moves a tiered acquire's budget past the tiers
// its site is blocked on, as far as a tier is left: a site that banned the
// bound's worth of one tier's proxies gets the next tier's, not an error
// (docs/tiers.md). Only an acquire that names its namespace is escalated.
func (s *Store) escalateBlockedTierLocked(req *AcquireRequest, now time.Time) {
	if req.Namespace == "" || req.site == "" || !req.Selector.Empty() || !s.siteBans.has(req.Namespace, req.site) {
		return
	}
	t, key := s.tieringLocked(req.Namespace, req.Domain)
	if t == nil {
		return
	}
	var st *tierEntry
	tier := 0
	if e := s.polite.tiers.entries[key]; e != nil {
		st, tier = e, e.state.Tier()
	}
	for tier+1 < len(t.Selectors) {
		if _, blocked := s.siteBans.blocked(req.Namespace, req.site, tier, now); !blocked {
			break
		}
		tier++
	}
	if tier == 0 || (st != nil && st.state.Tier() >= tier) {
		return
	}
	if st == nil {
		st = s.tierEntryLocked(key)
	}
	st.state.Seed(tier, now)
}

// siteCheck answers, for one selection, whether the site's bans hold a
// proxy back; like politeCheck it looks a namespace's tiering up once.
// Its zero value (no domain, or no site remembered) holds nothing back.
type siteCheck struct {
	s            *Store
	site, domain string
	now          time.Time
	ns           string
	tiering      *Tiering
	looked       bool
	// held: some proxy was held back; until: the earliest end of those
	// holds.
	held  bool
	until time.Time
}

func (s *Store) siteCheckLocked(req *AcquireRequest, now time.Time) siteCheck {
	if req.site == "" || s.siteBans.entries == 0 {
		return siteCheck{}
	}
	return siteCheck{s: s, site: req.site, domain: req.Domain, now: now}
}

// holds says whether p may not be granted for the site now.
func (c *siteCheck) holds(p *proxyState) bool {
	ns := p.info.Key.Namespace
	if c.s == nil || !c.s.siteBans.has(ns, c.site) {
		return false
	}
	if !c.looked || ns != c.ns {
		c.ns, c.tiering, c.looked = ns, c.s.tieringOfLocked(ns, c.domain), true
	}
	until, blocked := c.s.siteBans.blocked(ns, c.site, c.s.proxyTierLocked(p, c.tiering), c.now)
	if !blocked {
		return false
	}
	if !c.held || until.Before(c.until) {
		c.until = until
	}
	c.held = true
	return true
}

// err is the refusal when nothing was granted and some proxy was held back.
func (c *siteCheck) err() error {
	return &SiteBanningError{Site: c.site, Proxies: c.s.siteBans.bound, Window: c.s.siteBans.window, RetryAfter: c.until.Sub(c.now)}
}

// SiteBlocks returns the sites no lease is granted for now, by namespace
// and site, each with the CrawlPolicy that governs it (for its event).
// It fails with ErrNotLeader on a store that does not lead.
func (s *Store) SiteBlocks() ([]SiteBlock, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return nil, ErrNotLeader
	}
	blocks := s.siteBans.blocks(s.clock.Now())
	for i := range blocks {
		b := &blocks[i]
		policy, _, _, ok := matchRule(s.polite.policies[b.Namespace], b.Domain)
		if !ok {
			continue
		}
		b.Policy = policy
		if t, _ := s.tieringLocked(b.Namespace, b.Domain); t != nil && b.Tier >= 0 && b.Tier < len(t.Names) {
			b.TierName = t.Names[b.Tier]
		}
	}
	return blocks, nil
}
