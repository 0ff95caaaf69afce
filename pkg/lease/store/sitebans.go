package store

import (
	"cmp"
	"container/list"
	"slices"
	"strings"
	"time"
)

// Site bans: a site that bans every proxy it is sent must not burn a
// namespace's fleet (issue 64; docs/decisions/0413-a-site-bans-a-bounded-number-of-proxies.md).
// siteBans counts, per namespace and site (hostrule.Site), the distinct
// proxy instances the site banned within a window, each with the tier it
// was on (-1: no tiers). Once a tier's count reaches the bound, no new
// lease for the site is granted on a proxy of that namespace and tier
// until the oldest of those bans leaves the window; the store escalates a
// tiered budget instead where a tier above is left (tiers.go).
//
// It is a policy of its own: it owns its state, answers pure questions
// given the time (noteBan, blocked, blocks) and knows nothing of the Store,
// which asks it when a lease ends banned and when it selects a proxy.
//
// Memory is bounded: at most maxSitesPerNamespace sites per namespace (a
// new one beyond evicts that namespace's least recently banned site, so a
// tenant's junk never evicts another's), and per site at most 2×bound
// bans (the oldest goes first; only bound of them decide). An entry whose
// newest ban has left the window is dead and is dropped first.

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

// siteBans is the policy's state.
type siteBans struct {
	bound      int
	window     time.Duration
	namespaces map[string]*namespaceSiteBans
	entries    int
}

func newSiteBans(bound int, window time.Duration) siteBans {
	return siteBans{bound: bound, window: window, namespaces: map[string]*namespaceSiteBans{}}
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
	// "" if none; TierName the tier's name under that rule. The Store
	// fills them in (Store.SiteBlocks).
	Policy, TierName string
}

// blocks lists every block in force at now, by namespace and site.
func (b *siteBans) blocks(now time.Time) []SiteBlock {
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
	return out
}
