package store

import (
	"cmp"
	"container/list"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Site bans: a site that bans every proxy it is sent must not burn a
// namespace's fleet (issue 64; docs/decisions/0413-a-site-bans-a-bounded-number-of-proxies.md).
// siteBans counts, per namespace and site (Config.Site: site.Of in the operator), the distinct
// proxy instances the site banned within a window, each with the tier it
// was on (-1: no tiers). Once a tier's count reaches the bound, no new
// lease for the site is granted on a proxy of that namespace and tier
// until the oldest of those bans leaves the window; a tiered budget moves
// on to the next tier instead where one is left (tiers.go, choiceFor).
//
// It is a policy (policy.go): it owns its state, which changes only when
// apply carries out a Ban (banned, at the ban's time) or a promotion; at a
// selection it refuses the proxies the site may not have (admit), and the
// acquire is answered at once with *SiteBanningError.
//
// Memory is bounded: at most maxSitesPerNamespace sites per namespace (a
// new one beyond evicts that namespace's least recently banned site, so a
// tenant's junk never evicts another's), and per site at most 2×bound
// bans (the oldest goes first; only bound of them decide). An entry whose
// newest ban has left the window at the time of a new site's ban is dead
// and is dropped first. The namespaces are those whose proxies were banned.

// Defaults of the site-ban bound (Config.SiteBanProxies, SiteBanWindow).
const (
	DefaultSiteBanProxies = 5
	DefaultSiteBanWindow  = 10 * time.Minute
	// MaxSiteBanProxies bounds Config.SiteBanProxies, and so each site's
	// memory (2× the bound).
	MaxSiteBanProxies = 100
	// maxSitesPerNamespace bounds the sites remembered per namespace.
	maxSitesPerNamespace = 1024
)

// StateSiteBans is the StateMetrics kind of the remembered sites.
const StateSiteBans = "site_bans"

type siteBanKey struct {
	namespace, site string
}

// proxyBan is a site's latest ban of one proxy instance.
type proxyBan struct {
	proxy ObjectName
	// instance is the proxy's providerID: a new instance under the same
	// name is another IP.
	instance string
	tier     int
	at       time.Time
}

type siteBanEntry struct {
	key siteBanKey
	// domain is the name the latest ban was for: the CrawlPolicy rule
	// that governs the site, for events.
	domain string
	// bans, oldest first; one per (proxy, instance).
	bans []proxyBan
	elem *list.Element // in its namespace's lru
}

type namespaceSiteBans struct {
	sites map[string]*siteBanEntry
	// lru holds the sites, most recently banned first.
	lru *list.List
}

// siteBans is the policy.
type siteBans struct {
	bound   int
	window  time.Duration
	tiers   *tiers
	metrics Metrics
	// siteOf is Config.Site: a domain's site.
	siteOf     func(domain string) string
	namespaces map[string]*namespaceSiteBans
	entries    int

	// check is the prepared selection's.
	check siteCheck
}

// siteCheck is one selection's question: may a proxy be granted for site
// (domain's) at now. Like tierCheck it looks a namespace's tiering up once.
type siteCheck struct {
	site, domain string
	now          time.Time
	ns           string
	tiering      *Tiering
	looked       bool
}

func newSiteBans(bound int, window time.Duration, ts *tiers, m Metrics, siteOf func(string) string) *siteBans {
	return &siteBans{bound: bound, window: window, tiers: ts, metrics: m, siteOf: siteOf, namespaces: map[string]*namespaceSiteBans{}}
}

// prepare: only an acquire with a domain whose site banned something.
func (b *siteBans) prepare(req AcquireRequest, now time.Time, _ bool) bool {
	b.check = siteCheck{}
	if req.site == "" || b.entries == 0 {
		return false
	}
	b.check = siteCheck{site: req.site, domain: req.Domain, now: now}
	return true
}

// admit refuses p when the site has banned the bound's worth of p's
// namespace's proxies on p's tier.
func (b *siteBans) admit(p *proxyState) refusal {
	c := &b.check
	ns := p.info.Key.Namespace
	if !b.has(ns, c.site) {
		return refusal{}
	}
	if !c.looked || ns != c.ns {
		c.ns, c.tiering, c.looked = ns, b.tieringOf(ns, c.domain), true
	}
	if until, blocked := b.blocked(ns, c.site, proxyTier(p, c.tiering), c.now); blocked {
		return refusal{reason: ErrSiteBanning, until: until}
	}
	return refusal{}
}

func (*siteBans) relaxable() bool { return false }

func (*siteBans) confirm(*proxyState, time.Time, func(Effect)) (tierNote, error) {
	return tierNote{}, nil
}

func (*siteBans) installed(*lease, install) {}
func (*siteBans) ended(*lease)              {}

// forget keeps a gone proxy's bans: a recycled member was burned.
func (*siteBans) forget(ObjectName, bool) {}
func (*siteBans) termEnded()              {}

// promoted moves every ban on by skew, so that no block ends earlier on
// this clock than on the previous leader's.
func (b *siteBans) promoted(skew time.Duration) {
	for _, ns := range b.namespaces {
		for _, e := range ns.sites {
			for i := range e.bans {
				e.bans[i].at = e.bans[i].at.Add(skew)
			}
		}
	}
}

// banned counts a ban of p by site (for domain) at the time at: apply's
// part of a Ban.
func (b *siteBans) banned(p *proxyState, site, domain string, at time.Time) {
	ns := p.info.Key.Namespace
	tier := proxyTier(p, b.tieringOf(ns, domain))
	if _, evicted := b.noteBan(ns, site, domain, p.info.Key, p.info.ProviderID, tier, at); evicted {
		observeEviction(b.metrics, StateSiteBans)
	}
	setStateEntries(b.metrics, StateSiteBans, b.entries)
}

// tieringOf is the tiering of the rule that governs domain in ns, nil
// for none.
func (b *siteBans) tieringOf(ns, domain string) *Tiering {
	if b.tiers == nil {
		return nil
	}
	t, _ := b.tiers.tiering(ns, domain)
	return t
}

// proxyTier is the index of the first of t's tiers p is on, -1 when t is
// nil or p is on none.
func proxyTier(p *proxyState, t *Tiering) int {
	if t == nil {
		return -1
	}
	return slices.IndexFunc(t.Selectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(p.info.Labels)) })
}

// refusedFor is the refusal of an acquire for site whose proxies were all
// held back, the earliest of them free again at until.
func (b *siteBans) refusedFor(site string, now, until time.Time) error {
	return &SiteBanningError{Site: site, Proxies: b.bound, Window: b.window, RetryAfter: until.Sub(now)}
}

// noteBan records that site (in namespace, for domain) banned the proxy
// instance, which is on tier (-1: untiered), at now. It reports whether
// that tier's bans now reach the bound, and whether a site was evicted to
// make room.
func (b *siteBans) noteBan(namespace, site, domain string, proxy ObjectName, instance string, tier int, now time.Time) (reached, evicted bool) {
	ns := b.namespaces[namespace]
	if ns == nil {
		ns = &namespaceSiteBans{sites: map[string]*siteBanEntry{}, lru: list.New()}
		b.namespaces[namespace] = ns
	}
	e := ns.sites[site]
	if e == nil {
		evicted = b.makeRoom(ns, now)
		b.namespaces[namespace] = ns // makeRoom may have emptied it
		e = &siteBanEntry{key: siteBanKey{namespace, site}}
		e.elem = ns.lru.PushFront(e)
		ns.sites[site] = e
		b.entries++
	} else {
		ns.lru.MoveToFront(e.elem)
	}
	e.domain = domain
	e.bans = slices.DeleteFunc(e.bans, func(pb proxyBan) bool {
		return (pb.proxy == proxy && pb.instance == instance) || !b.inWindow(pb, now)
	})
	e.bans = append(e.bans, proxyBan{proxy: proxy, instance: instance, tier: tier, at: now})
	if over := len(e.bans) - 2*b.bound; over > 0 {
		e.bans = slices.Delete(e.bans, 0, over)
	}
	_, reached = b.blocked(namespace, site, tier, now)
	return reached, evicted
}

// makeRoom drops ns's dead sites from the least recently banned end and,
// at the cap, its least recently banned live one (reported).
func (b *siteBans) makeRoom(ns *namespaceSiteBans, now time.Time) (evicted bool) {
	for el := ns.lru.Back(); el != nil; el = ns.lru.Back() {
		e := el.Value.(*siteBanEntry)
		dead := len(e.bans) == 0 || !b.inWindow(e.bans[len(e.bans)-1], now)
		if !dead && ns.lru.Len() < maxSitesPerNamespace {
			break
		}
		b.drop(ns, e)
		evicted = evicted || !dead
	}
	return evicted
}

func (b *siteBans) drop(ns *namespaceSiteBans, e *siteBanEntry) {
	ns.lru.Remove(e.elem)
	delete(ns.sites, e.key.site)
	b.entries--
	if ns.lru.Len() == 0 {
		delete(b.namespaces, e.key.namespace)
	}
}

func (b *siteBans) inWindow(pb proxyBan, now time.Time) bool { return now.Sub(pb.at) < b.window }

// blocked reports whether site may have no new lease on a proxy of
// namespace on tier at now, and until when: the bound's worth of its bans
// on that tier are in the window, and the block lasts until the oldest of
// the latest bound of them leaves it.
func (b *siteBans) blocked(namespace, site string, tier int, now time.Time) (until time.Time, ok bool) {
	if b.bound <= 0 {
		return time.Time{}, false
	}
	ns := b.namespaces[namespace]
	if ns == nil {
		return time.Time{}, false
	}
	e := ns.sites[site]
	if e == nil {
		return time.Time{}, false
	}
	n := 0
	for i := len(e.bans) - 1; i >= 0; i-- {
		pb := e.bans[i]
		if !b.inWindow(pb, now) {
			break // older ones are older still
		}
		if pb.tier != tier {
			continue
		}
		if n++; n == b.bound {
			return pb.at.Add(b.window), true
		}
	}
	return time.Time{}, false
}

// has says whether namespace remembers any ban by site: the selection
// asks the rest only then.
func (b *siteBans) has(namespace, site string) bool {
	ns := b.namespaces[namespace]
	return ns != nil && ns.sites[site] != nil
}

// SiteBlock is a site that no lease is granted for on a namespace's
// proxies (of one tier, for a tiered rule) until Until.
type SiteBlock struct {
	Namespace, Site string
	// Domain is the name the latest ban was for.
	Domain string
	// Tier is the index of the tier blocked, -1 for untiered proxies.
	Tier int
	// Proxies is how many distinct proxies the site banned on that tier
	// within Window.
	Proxies int
	Window  time.Duration
	Until   time.Time
	// Policy is the CrawlPolicy (of Namespace) whose rule governs Domain,
	// "" if none; TierName the tier's name under that rule.
	Policy, TierName string
}

// blocks lists every block in force at now, by namespace and site, with
// the CrawlPolicy rule that governs each (rs) and its tier's name.
func (b *siteBans) blocks(rs *rules, now time.Time) []SiteBlock {
	var out []SiteBlock
	for _, ns := range b.namespaces {
		for _, e := range ns.sites {
			tiers := map[int]int{}
			for _, pb := range e.bans {
				if b.inWindow(pb, now) {
					tiers[pb.tier]++
				}
			}
			for tier, n := range tiers {
				if until, ok := b.blocked(e.key.namespace, e.key.site, tier, now); ok {
					out = append(out, SiteBlock{Namespace: e.key.namespace, Site: e.key.site, Domain: e.domain, Tier: tier,
						Proxies: n, Window: b.window, Until: until})
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y SiteBlock) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Site, y.Site), cmp.Compare(x.Tier, y.Tier))
	})
	if rs == nil {
		return out
	}
	for i := range out {
		bl := &out[i]
		key, _, ok := rs.match(bl.Namespace, bl.Domain)
		if !ok {
			continue
		}
		bl.Policy = key.policy
		if t := b.tieringOf(bl.Namespace, bl.Domain); t != nil && bl.Tier >= 0 && bl.Tier < len(t.Names) {
			bl.TierName = t.Names[bl.Tier]
		}
	}
	return out
}

// encodeSiteBans writes the policy's state for a snapshot: each namespace
// (sorted) with its sites from the least recently banned, each with its
// bans oldest first, so that the restored lists keep their orders.
func encodeSiteBans(w *fieldWriter, b *siteBans) {
	namespaces := slices.Sorted(maps.Keys(b.namespaces))
	w.uint(uint64(len(namespaces)))
	for _, name := range namespaces {
		ns := b.namespaces[name]
		w.string(name)
		w.uint(uint64(ns.lru.Len()))
		for el := ns.lru.Back(); el != nil; el = el.Prev() {
			e := el.Value.(*siteBanEntry)
			w.string(e.key.site)
			w.string(e.domain)
			w.uint(uint64(len(e.bans)))
			for _, pb := range e.bans {
				w.name(pb.proxy)
				w.string(pb.instance)
				w.int(int64(pb.tier))
				w.time(pb.at)
			}
		}
	}
}

// decodeSiteBans reads what encodeSiteBans wrote into an empty policy.
func decodeSiteBans(r *fieldReader, b *siteBans) {
	for range r.count() {
		name := r.string()
		ns := &namespaceSiteBans{sites: map[string]*siteBanEntry{}, lru: list.New()}
		for range r.count() {
			e := &siteBanEntry{key: siteBanKey{namespace: name, site: r.string()}, domain: r.string()}
			for range r.count() {
				e.bans = append(e.bans, proxyBan{proxy: r.name(), instance: r.string(), tier: int(r.int()), at: r.time()})
			}
			e.elem = ns.lru.PushFront(e)
			ns.sites[e.key.site] = e
			b.entries++
		}
		if ns.lru.Len() > 0 {
			b.namespaces[name] = ns
		}
	}
}
