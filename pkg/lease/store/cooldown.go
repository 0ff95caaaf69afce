package store

import (
	"time"
)

// A cool-down keeps a proxy away from one site (a registrable domain,
// hostrule.Site: every name of it) after a holder reported it banned there. Each ban within the memory of the previous ones doubles the
// cool-down (base, 2×base, 4×base, … capped at max); every quiet decay
// period after a cool-down ends forgets one strike, and an entry with no
// strikes left is dropped.

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

// ban applies one more strike at now to c (nil: the first) and returns the
// updated entry. It never shortens a cool-down in force.
func ban(c *cooldown, key cooldownKey, now time.Time, base, max, decay time.Duration) *cooldown {
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
