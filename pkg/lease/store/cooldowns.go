package store

import (
	"cmp"
	"container/heap"
	"maps"
	"slices"
	"time"
)

// Cool-downs keep a proxy away from one site (a registrable domain,
// Config.Site: every name of it) after a holder reported it banned
// there. Each ban within the memory of the previous ones doubles the
// cool-down (base, 2×base, 4×base, … capped at max); every quiet decay
// period after a cool-down ends forgets one strike, and an entry with no
// strikes left is dropped. The entries are bounded by Config.MaxCooldowns:
// a new one beyond the cap evicts the entry whose next event is soonest
// (the one that would end or be forgotten first), the cheapest to lose.

type cooldownKey struct {
	proxy ObjectName
	// domain is the site banned.
	domain string
}

type cooldown struct {
	key     cooldownKey
	strikes int
	// until: the proxy is cooling down for the domain while now < until.
	until time.Time
	// forgetAt: every strike has decayed; the entry goes.
	forgetAt time.Time
	inForce  bool
	index    int // in cooldownHeap
}

// nextEvent is when the entry changes next: the cool-down ends, or it is forgotten.
func (c *cooldown) nextEvent() time.Time {
	if c.inForce {
		return c.until
	}
	return c.forgetAt
}

// proxyCooldowns are one proxy's entries by domain; inForce counts those in force.
type proxyCooldowns struct {
	byDomain map[string]*cooldown
	inForce  int
}

// cooldowns is the policy: every entry by proxy, and all of them by their
// next event.
type cooldowns struct {
	noMemory
	base, max, decay time.Duration
	maxEntries       int
	metrics          Metrics

	byProxy map[ObjectName]*proxyCooldowns
	heap    cooldownHeap
	inForce int

	// check is the prepared acquire's site.
	check string
}

func newCooldowns(cfg Config) *cooldowns {
	return &cooldowns{base: cfg.CooldownBase, max: cfg.CooldownMax, decay: cfg.CooldownDecay, maxEntries: cfg.MaxCooldowns,
		metrics: cfg.Metrics, byProxy: map[ObjectName]*proxyCooldowns{}}
}

func (c *cooldowns) prepare(req AcquireRequest, _ time.Time, _ bool) bool {
	c.check = req.site
	return req.site != "" && c.inForce > 0
}

func (c *cooldowns) admit(p *proxyState) refusal {
	if cd := c.coolingFor(p.info.Key, c.check); cd != nil {
		return refusal{reason: ErrCoolingDown, until: cd.until}
	}
	return refusal{}
}

func (*cooldowns) relaxable() bool { return false }

func (*cooldowns) confirm(*proxyState, time.Time, func(Effect)) (tierNote, error) {
	return tierNote{}, nil
}

// coolingFor returns the cool-down of proxy in force for domain, if any.
func (c *cooldowns) coolingFor(proxy ObjectName, domain string) *cooldown {
	if domain == "" || c.inForce == 0 {
		return nil
	}
	pc := c.byProxy[proxy]
	if pc == nil || pc.inForce == 0 {
		return nil
	}
	if cd := pc.byDomain[domain]; cd != nil && cd.inForce {
		return cd
	}
	return nil
}

// forget drops a proxy's entries: gone, or a new instance (a new IP) whose
// bans were the old one's.
func (c *cooldowns) forget(key ObjectName, _ bool) {
	pc := c.byProxy[key]
	if pc == nil {
		return
	}
	// In the domains' order, not the map's: the heap's layout is state too.
	for _, domain := range slices.Sorted(maps.Keys(pc.byDomain)) {
		heap.Remove(&c.heap, pc.byDomain[domain].index)
	}
	c.inForce -= pc.inForce
	delete(c.byProxy, key)
	c.metrics.SetCooldowns(c.inForce)
	setStateEntries(c.metrics, StateCooldowns, len(c.heap))
}

// promoted moves every entry's end and memory on by skew, so that no
// cool-down ends earlier on this clock than on the previous leader's. A
// move of every entry keeps the heap's order.
func (c *cooldowns) promoted(skew time.Duration) {
	for _, cd := range c.heap {
		cd.until, cd.forgetAt = cd.until.Add(skew), cd.forgetAt.Add(skew)
	}
}

// ban applies one more strike to proxy for domain at the time at.
func (c *cooldowns) ban(key cooldownKey, at time.Time) {
	pc := c.byProxy[key.proxy]
	cd := pc.entry(key.domain)
	if cd == nil {
		c.makeRoom()
		if pc = c.byProxy[key.proxy]; pc == nil { // makeRoom may have dropped it
			pc = &proxyCooldowns{byDomain: map[string]*cooldown{}}
			c.byProxy[key.proxy] = pc
		}
	}
	wasInForce := cd != nil && cd.inForce
	cd = strike(cd, key, at, c.base, c.max, c.decay)
	pc.byDomain[key.domain] = cd
	if cd.index < 0 {
		heap.Push(&c.heap, cd)
		setStateEntries(c.metrics, StateCooldowns, len(c.heap))
	} else {
		heap.Fix(&c.heap, cd.index)
	}
	if !wasInForce {
		pc.inForce++
		c.inForce++
		c.metrics.SetCooldowns(c.inForce)
	}
}

func (pc *proxyCooldowns) entry(domain string) *cooldown {
	if pc == nil {
		return nil
	}
	return pc.byDomain[domain]
}

// makeRoom evicts entries, soonest next event first, until a new one fits the cap.
func (c *cooldowns) makeRoom() {
	for len(c.heap) >= c.maxEntries {
		cd := c.heap[0]
		c.drop(cd.key)
		observeEviction(c.metrics, StateCooldowns)
	}
}

// lapse: the cool-down of key stopped being in force.
func (c *cooldowns) lapse(key cooldownKey) {
	pc := c.byProxy[key.proxy]
	cd := pc.entry(key.domain)
	if cd == nil || !cd.inForce {
		return
	}
	cd.inForce = false
	heap.Fix(&c.heap, cd.index)
	pc.inForce--
	c.inForce--
	c.metrics.SetCooldowns(c.inForce)
}

// drop forgets the entry of key.
func (c *cooldowns) drop(key cooldownKey) {
	pc := c.byProxy[key.proxy]
	cd := pc.entry(key.domain)
	if cd == nil {
		return
	}
	heap.Remove(&c.heap, cd.index)
	delete(pc.byDomain, key.domain)
	if cd.inForce {
		pc.inForce--
		c.inForce--
		c.metrics.SetCooldowns(c.inForce)
	}
	if len(pc.byDomain) == 0 {
		delete(c.byProxy, key.proxy)
	}
	setStateEntries(c.metrics, StateCooldowns, len(c.heap))
}

// due is the effect of the entry whose next event has come at now: its
// cool-down lapses, or it is forgotten; nil when none has.
func (c *cooldowns) due(now time.Time) Effect {
	if len(c.heap) == 0 || now.Before(c.heap[0].nextEvent()) {
		return nil
	}
	if cd := c.heap[0]; cd.inForce {
		return CooldownLapse{key: cd.key}
	}
	return CooldownDrop{key: c.heap[0].key}
}

// next is the next time an entry changes, zero if none.
func (c *cooldowns) next() time.Time {
	if len(c.heap) == 0 {
		return time.Time{}
	}
	return c.heap[0].nextEvent()
}

// coolingDown is, for each proxy with a cool-down in force, up to
// perProxy of its domains, the latest-ending first.
func (c *cooldowns) coolingDown(perProxy int) map[ObjectName]Cooling {
	out := map[ObjectName]Cooling{}
	for key, pc := range c.byProxy {
		if pc.inForce == 0 {
			continue
		}
		cl := Cooling{Total: pc.inForce, Domains: make([]DomainCooldown, 0, min(pc.inForce, perProxy))}
		for domain, cd := range pc.byDomain {
			if cd.inForce {
				cl.Domains = append(cl.Domains, DomainCooldown{Domain: domain, Until: cd.until})
			}
		}
		slices.SortFunc(cl.Domains, func(a, b DomainCooldown) int {
			return cmp.Or(b.Until.Compare(a.Until), cmp.Compare(a.Domain, b.Domain))
		})
		cl.Domains = cl.Domains[:min(len(cl.Domains), perProxy)]
		out[key] = cl
	}
	return out
}

// Cooling is what a proxy is cooling down for: the sites (registrable
// domains, Config.Site) whose cool-downs are in force, the latest-ending first, at most the number
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

// cooldownDuration is base·2^(strikes-1), capped at max.
func cooldownDuration(strikes int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < strikes && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// maxUsefulStrikes is the strike count at which the cool-down reaches max;
// counting further would only lengthen the memory, not the cool-down.
func maxUsefulStrikes(base, max time.Duration) int {
	n := 1
	for d := base; d < max; d *= 2 {
		n++
	}
	return n
}

// decayedStrikes is what is left of strikes at now, one strike forgotten per
// full decay period since the cool-down ended.
func decayedStrikes(strikes int, until, now time.Time, decay time.Duration) int {
	if !now.After(until) {
		return strikes
	}
	return max(0, strikes-int(now.Sub(until)/decay))
}

// strike applies one more strike at now to c (nil: the first) and returns
// the updated entry. It never shortens a cool-down in force.
func strike(c *cooldown, key cooldownKey, now time.Time, base, max, decay time.Duration) *cooldown {
	if c == nil {
		c = &cooldown{key: key, index: -1}
	}
	strikes := min(decayedStrikes(c.strikes, c.until, now, decay)+1, maxUsefulStrikes(base, max))
	until := now.Add(cooldownDuration(strikes, base, max))
	if c.until.After(until) {
		until = c.until
	}
	c.strikes, c.until = strikes, until
	c.forgetAt = until.Add(time.Duration(strikes) * decay)
	c.inForce = true
	return c
}

// cooldownHeap orders cool-downs by their next event.
type cooldownHeap []*cooldown

func (h cooldownHeap) Len() int           { return len(h) }
func (h cooldownHeap) Less(i, j int) bool { return h[i].nextEvent().Before(h[j].nextEvent()) }
func (h cooldownHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *cooldownHeap) Push(x any) {
	c := x.(*cooldown)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *cooldownHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.index = -1
	return c
}
