package store

import (
	"container/heap"
	"fmt"
	"time"
)

// The default rule's budgets, one per domain, are the part of politeness
// a caller creates at will (every new domain it acquires for), so they are
// bounded (docs/decisions/0212-domain-budgets-shared-per-namespace.md):
//
//   - Each namespace with a default rule gets an equal share of
//     --lease-max-domain-budgets (Config.MaxDomainBudgets): a tenant
//     leasing junk domains fills its own share, never another's.
//   - A budget with live leases, or whose interval since its last grant
//     still runs, is pinned: evicting it would let its limits lapse. The
//     others are idle, kept per namespace in a heap by when they stopped
//     binding; eviction takes the top, so an acquire does O(log n) work
//     for it, never a walk over pinned budgets.
//   - A budget is made for a grant only when its namespace has room or an
//     idle one to evict (admitDomainBudget, which emits the evictions as
//     effects: whether a budget is idle depends on the time); otherwise
//     the acquire is refused with ErrDomainBudgetsFull (429 DomainLimited),
//     never granted unbounded. A budget being charged is pinned, so never
//     the one evicted.

// ErrDomainBudgetsFull: a new domain under a namespace's default rule
// needs a budget, and every budget of the namespace's share is pinned. It
// is an ErrDomainLimited (errors.Is), answered like one.
var ErrDomainBudgetsFull = fmt.Errorf("%w: every per-domain budget of the namespace's share of --lease-max-domain-budgets is in use or in an interval", ErrDomainLimited)

// maxEvictionsPerAdmit bounds the work one acquire does to make room: a
// namespace over its share (its share shrank when another namespace got a
// default rule) drains by this many budgets an acquire.
const maxEvictionsPerAdmit = 4

// namespaceDomains are one namespace's default-rule budgets.
type namespaceDomains struct {
	count int
	// idle are those without live leases, the one that stopped binding
	// first on top.
	idle idleBudgets
}

// unpinnedAt is when an idle budget stops binding: its intervals since
// the last grant (fleet-wide and per proxy) have run. lastOn's entries are
// all at or before last, so none of them pins it past this.
func (b *budget) unpinnedAt() time.Time {
	return b.last.Add(max(b.limits.MinInterval, b.limits.MinIntervalPerProxy))
}

// admitDomainBudget makes sure a grant for domain on a proxy of ns can be
// charged within ns's share: nothing to do when a named rule or an
// existing budget takes it; else it emits the eviction of idle budgets of
// ns (at most maxEvictionsPerAdmit) until there is room, or refuses.
func (bs *budgets) admitDomainBudget(ns, domain string, now time.Time, emit func(Effect)) error {
	key, _, ok := bs.rules.match(ns, domain)
	if !ok || key.domain == "" || bs.budgets[key] != nil {
		return nil
	}
	nd := bs.domains[ns]
	if nd == nil {
		return nil
	}
	share := bs.rules.share()
	for i := 0; nd.count >= share && i < maxEvictionsPerAdmit; i++ {
		victim := nd.evictable(now)
		if victim == nil {
			break
		}
		emit(BudgetEvict{key: victim.key})
	}
	if nd.count < share {
		return nil
	}
	// A release may free one; an idle one frees itself when its interval ends.
	retry := time.Second
	if len(nd.idle) > 0 && nd.count == len(nd.idle) {
		retry = max(nd.idle[0].unpinnedAt().Sub(now), 0)
	}
	return &UnavailableError{Reason: ErrDomainBudgetsFull, RetryAfter: retry, rule: key.ruleOf(), limited: true}
}

// evictable is nd's idle budget that stopped binding first, if it may go at now.
func (nd *namespaceDomains) evictable(now time.Time) *budget {
	if len(nd.idle) == 0 || nd.idle[0].unpinnedAt().After(now) {
		return nil
	}
	return nd.idle[0]
}

// evict drops the budget key (KindBudgetEvict).
func (bs *budgets) evict(key budgetKey) {
	if b := bs.budgets[key]; b != nil {
		bs.dropBudget(b)
		observeEviction(bs.metrics, StateDomainBudgets)
	}
}

// addDomainBudget counts a new default-rule budget. It is made to be
// charged, so it starts pinned.
func (bs *budgets) addDomainBudget(b *budget) {
	nd := bs.domains[b.key.namespace]
	if nd == nil {
		nd = &namespaceDomains{}
		bs.domains[b.key.namespace] = nd
	}
	nd.count++
	bs.domainTotal++
	setStateEntries(bs.metrics, StateDomainBudgets, bs.domainTotal)
}

// idleDomainBudget: b's last live lease ended.
func (bs *budgets) idleDomainBudget(b *budget) {
	if nd := bs.domains[b.key.namespace]; b.key.domain != "" && nd != nil && b.idleAt < 0 {
		heap.Push(&nd.idle, b)
	}
}

// busyDomainBudget: b has a live lease again.
func (bs *budgets) busyDomainBudget(b *budget) {
	if nd := bs.domains[b.key.namespace]; b.idleAt >= 0 && nd != nil {
		heap.Remove(&nd.idle, b.idleAt)
	}
}

func (bs *budgets) dropBudget(b *budget) {
	delete(bs.budgets, b.key)
	if b.key.domain == "" {
		return
	}
	nd := bs.domains[b.key.namespace]
	if b.idleAt >= 0 {
		heap.Remove(&nd.idle, b.idleAt)
	}
	nd.count--
	bs.domainTotal--
	if nd.count == 0 {
		delete(bs.domains, b.key.namespace)
	}
	setStateEntries(bs.metrics, StateDomainBudgets, bs.domainTotal)
}

// reshare gives back, after a policy change at the time at shrank the
// shares, what idle budgets may go at that time from each namespace over
// its share (a policy change is rare, and its recharge walks every budget
// anyway); the pinned rest drain at its next acquires. Which go depends
// only on at and the state: apply may do it.
func (bs *budgets) reshare(at time.Time) {
	share := bs.rules.share()
	for _, nd := range bs.domains {
		for nd.count > share {
			victim := nd.evictable(at)
			if victim == nil {
				break
			}
			bs.dropBudget(victim)
			observeEviction(bs.metrics, StateDomainBudgets)
		}
	}
}

// idleBudgets is a heap of idle default-rule budgets by unpinnedAt. A
// budget's key in it does not change while it is there: last moves only
// at a grant, which makes it busy first.
type idleBudgets []*budget

func (h idleBudgets) Len() int { return len(h) }

func (h idleBudgets) Less(i, j int) bool { return h[i].unpinnedAt().Before(h[j].unpinnedAt()) }

func (h idleBudgets) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idleAt, h[j].idleAt = i, j
}

func (h *idleBudgets) Push(x any) {
	b := x.(*budget)
	b.idleAt = len(*h)
	*h = append(*h, b)
}

func (h *idleBudgets) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	b.idleAt = -1
	return b
}
