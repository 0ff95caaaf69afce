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
//     idle one to evict (admitDomainBudgetLocked); otherwise the acquire is
//     refused with ErrDomainBudgetsFull (429 DomainLimited), never granted
//     unbounded. A budget being charged is pinned, so never the one evicted.

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

// share is how many default-rule budgets each namespace may keep.
func (p *politeness) share() int {
	return max(1, p.maxDomains/max(1, p.withDefault))
}

// unpinnedAt is when an idle budget stops binding: its intervals since
// the last grant (fleet-wide and per proxy) have run. lastOn's entries are
// all at or before last, so none of them pins it past this.
func (b *budget) unpinnedAt() time.Time {
	return b.last.Add(max(b.limits.MinInterval, b.limits.MinIntervalPerProxy))
}

// admitDomainBudgetLocked makes sure a grant for domain on a proxy of ns
// can be charged within ns's share: nothing to do when a named rule or an
// existing budget takes it; else it evicts idle budgets of ns (at most
// maxEvictionsPerAdmit) until there is room, or refuses.
func (s *Store) admitDomainBudgetLocked(ns, domain string, now time.Time) error {
	if domain == "" || len(s.polite.policies[ns]) == 0 {
		return nil
	}
	policy, rule, _, ok := matchRule(s.polite.policies[ns], domain)
	if !ok || rule != DefaultRuleHost {
		return nil
	}
	key := budgetKey{namespace: ns, policy: policy, rule: rule, domain: domain}
	if s.polite.budgets[key] != nil {
		return nil
	}
	nd := s.polite.domains[ns]
	if nd == nil {
		return nil
	}
	share := s.polite.share()
	for i := 0; nd.count >= share && i < maxEvictionsPerAdmit && s.evictIdleDomainLocked(nd, now); i++ {
	}
	if nd.count < share {
		return nil
	}
	// A release may free one; an idle one frees itself when its interval ends.
	retry := time.Second
	if len(nd.idle) > 0 && nd.count == len(nd.idle) {
		retry = max(nd.idle[0].unpinnedAt().Sub(now), 0)
	}
	// Not kept: it names the rule for the counts and metrics of the refusal.
	limitedBy := &budget{key: key, counts: s.polite.countsOf(key), idleAt: -1}
	return &UnavailableError{Reason: ErrDomainBudgetsFull, RetryAfter: retry, budget: limitedBy}
}

// evictIdleDomainLocked drops nd's idle budget that stopped binding first,
// if it has; false when none may go.
func (s *Store) evictIdleDomainLocked(nd *namespaceDomains, now time.Time) bool {
	if len(nd.idle) == 0 || nd.idle[0].unpinnedAt().After(now) {
		return false
	}
	s.dropBudgetLocked(nd.idle[0])
	s.observeEviction(StateDomainBudgets)
	return true
}

// addDomainBudgetLocked counts a new default-rule budget. It is made to be
// charged, so it starts pinned.
func (s *Store) addDomainBudgetLocked(b *budget) {
	nd := s.polite.domains[b.key.namespace]
	if nd == nil {
		nd = &namespaceDomains{}
		s.polite.domains[b.key.namespace] = nd
	}
	nd.count++
	s.polite.domainTotal++
	s.setStateEntries(StateDomainBudgets, s.polite.domainTotal)
}

// idleDomainBudgetLocked: b's last live lease ended.
func (s *Store) idleDomainBudgetLocked(b *budget) {
	if nd := s.polite.domains[b.key.namespace]; b.key.domain != "" && nd != nil && b.idleAt < 0 {
		heap.Push(&nd.idle, b)
	}
}

// busyDomainBudgetLocked: b has a live lease again.
func (s *Store) busyDomainBudgetLocked(b *budget) {
	if nd := s.polite.domains[b.key.namespace]; b.idleAt >= 0 && nd != nil {
		heap.Remove(&nd.idle, b.idleAt)
	}
}

func (s *Store) dropBudgetLocked(b *budget) {
	delete(s.polite.budgets, b.key)
	if b.key.domain == "" {
		return
	}
	nd := s.polite.domains[b.key.namespace]
	if b.idleAt >= 0 {
		heap.Remove(&nd.idle, b.idleAt)
	}
	nd.count--
	s.polite.domainTotal--
	if nd.count == 0 {
		delete(s.polite.domains, b.key.namespace)
	}
	s.setStateEntries(StateDomainBudgets, s.polite.domainTotal)
}

// resharedLocked recounts the namespaces with a default rule after a
// policy changed. When that shrank the shares, each namespace over its
// share gives back what idle budgets may go now (a policy change is rare,
// and its recharge walks every budget anyway); the pinned rest drain at
// its next acquires.
func (s *Store) resharedLocked() {
	n := 0
	for _, ps := range s.polite.policies {
		for _, p := range ps {
			if p.Default != nil {
				n++
				break
			}
		}
	}
	s.polite.withDefault = n
	now, share := s.clock.Now(), s.polite.share()
	for _, nd := range s.polite.domains {
		for nd.count > share && s.evictIdleDomainLocked(nd, now) {
		}
	}
}

// forgetBudgetsLocked drops every budget when the term ends: the leases
// they counted are forgotten with it, and a budget left charged would be
// pinned for good (and counted twice once its lease is relearned).
func (s *Store) forgetBudgetsLocked() {
	clear(s.polite.budgets)
	clear(s.polite.domains)
	s.polite.domainTotal = 0
	for k, c := range s.polite.counts {
		c.inUse = 0
		if m, ok := s.metrics.(PolicyMetrics); ok {
			m.SetDomainBudgetInUse(k.namespace, k.policy, k.rule, 0)
		}
	}
	s.setStateEntries(StateDomainBudgets, 0)
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
