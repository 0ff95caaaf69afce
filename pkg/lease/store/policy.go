package store

import "time"

// policy is one component of the fleet's memory: cool-downs, budgets,
// tiers, the tally, sticky sessions, session state. It owns its state and
// neither holds nor receives the Store; the Store keeps the proxies, the
// leases and the term, and calls every policy in turn, in the order of
// state.policies, at its decision points (may this proxy be granted for
// this acquire) and at its apply points (a lease became live, ended, a
// proxy or instance is gone, the term ended). A policy with a say on only
// some of them embeds noDecision or noMemory. The next policy is a new type
// and one line in newState that registers it
// (docs/decisions/0370-lease-store-components-and-effects.md).
type policy interface {
	// Decision points: on the store that decides, under its lock.

	// prepare readies the policy's checks of one selection for req at
	// now, and says whether it has any (false: the selection skips it).
	// relaxed: the second selection after a first that found nothing,
	// for a policy that said it would then admit more (relaxable).
	prepare(req AcquireRequest, now time.Time, relaxed bool) bool
	// admit is zero when the prepared acquire may have p, else why not.
	admit(p *proxyState) refusal
	// relaxable: a relaxed selection would admit more than this one.
	relaxable() bool
	// confirm has the last word on the proxy a selection chose: it may
	// refuse it, emit the effects that must come before the grant, and
	// note what the grant's apply needs of its decision (only tiers note
	// anything: the tier the grant goes to).
	confirm(p *proxyState, now time.Time, emit func(Effect)) (tierNote, error)

	// Apply points: on every store that applies the effects.

	// installed: l became live, by a grant or relearnt (how says).
	installed(l *lease, how install)
	// ended: l stopped being live.
	ended(l *lease)
	// forget: the proxy is gone (instance false), or only its instance
	// was replaced under it (instance true).
	forget(key ObjectName, instance bool)
	// termEnded: the term ended and its leases are forgotten.
	termEnded()
	// promoted: a follower became the store that decides, its clock up to
	// skew behind the previous leader's: times the policy keeps of the
	// previous leader's clock that hold back grants move on by skew.
	promoted(skew time.Duration)
}

// refusal is a policy's answer that a proxy may not be granted: reason is
// nil when it may. until is when it may (zero: unknown, or never for this
// acquire), rule the crawl-policy rule that holds it back (budgets).
type refusal struct {
	reason error
	until  time.Time
	rule   budgetKey
}

// filtered: the proxy is not one the acquire may have at all (another
// tier); it is skipped without a reason to report.
var filtered = refusal{reason: errFiltered}

// install is how a lease became live: granted (with what its decision
// noted) or, grant false, relearnt from its ID by a new leader; at when.
type install struct {
	grant bool
	tier  tierNote
	at    time.Time
}

// noDecision is embedded by a policy that never refuses a proxy.
type noDecision struct{}

func (noDecision) prepare(AcquireRequest, time.Time, bool) bool { return false }
func (noDecision) admit(*proxyState) refusal                    { return refusal{} }
func (noDecision) relaxable() bool                              { return false }
func (noDecision) confirm(*proxyState, time.Time, func(Effect)) (tierNote, error) {
	return tierNote{}, nil
}

// noMemory is embedded by a policy that keeps nothing per lease or proxy.
type noMemory struct{}

func (noMemory) installed(*lease, install) {}
func (noMemory) ended(*lease)              {}
func (noMemory) forget(ObjectName, bool)   {}
func (noMemory) termEnded()                {}
func (noMemory) promoted(time.Duration)    {}
