package store

import (
	"time"
)

// proxyState is the store's record of one proxy: its slots, its
// cool-downs and its place in the selection orders.

type proxyState struct {
	info ProxyInfo
	// urlHash is urlHash(info.URL), kept so that no grant hashes the URL.
	urlHash uint64
	// slots[i] is the live lease in slot i, or nil; len(slots) grows up to capacity.
	slots        []*lease
	held         int
	lastReleased time.Time
	// cooldowns by site (hostrule.Site of the domain banned); cooling
	// counts those in force.
	cooldowns map[string]*cooldown
	cooling   int
	// burn is the instance's lease and ban record (burn.go).
	burn burn
	// isReady: the feed reported it Ready. Its places in the selection
	// orders, in them exactly while it is Ready with a free slot (see
	// relistLocked).
	isReady           bool
	allLinks, nsLinks orderLinks
}

func (p *proxyState) capacity() int { return min(max(1, int(p.info.MaxLeases)), maxSlots) }

func (p *proxyState) free() bool { return p.held < p.capacity() }

func (p *proxyState) ready() bool { return p.isReady }

func (p *proxyState) listed() bool { return p.allLinks.in }

func (p *proxyState) freeSlot() int32 {
	for i, l := range p.slots {
		if l == nil {
			return int32(i)
		}
	}
	return int32(len(p.slots))
}

func (p *proxyState) occupant(slot int32) *lease {
	if int(slot) < len(p.slots) {
		return p.slots[slot]
	}
	return nil
}

func (p *proxyState) occupy(l *lease) {
	for int(l.slot) >= len(p.slots) {
		p.slots = append(p.slots, nil)
	}
	p.slots[l.slot] = l
	p.held++
}

// coolingFor returns the cool-down in force for site, if any.
func (p *proxyState) coolingFor(site string) *cooldown {
	if site == "" || p.cooling == 0 {
		return nil
	}
	if c := p.cooldowns[site]; c != nil && c.inForce {
		return c
	}
	return nil
}

// selectedBefore is the selection order: least recently released first
// (an expiry counts as a release; never released counts as oldest), then
// lower latency, then the name, so that the order is total and stable.
func selectedBefore(a, b *proxyState) bool {
	if !a.lastReleased.Equal(b.lastReleased) {
		return a.lastReleased.Before(b.lastReleased)
	}
	if a.info.LatencyMillis != b.info.LatencyMillis {
		return a.info.LatencyMillis < b.info.LatencyMillis
	}
	if a.info.Key.Namespace != b.info.Key.Namespace {
		return a.info.Key.Namespace < b.info.Key.Namespace
	}
	return a.info.Key.Name < b.info.Key.Name
}
