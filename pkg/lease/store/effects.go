package store

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Every change to the store's state is an effect: a value that the decision
// code (selection, politeness, tiers, expiry) produces and that one apply
// per kind (state.go) carries out. Apply reads no clock, draws nothing at
// random and decides nothing by map order, so that the same effects in the
// same order leave two stores in the same state: the times travel inside
// the effects. An effect is encoded to bytes and back by EncodeEffect and
// DecodeEffect (codec.go), and a store that only follows another applies
// them with Apply (docs/decisions/0370-lease-store-components-and-effects.md).
//
// What apply may still decide: evictions by a rule of the state alone (the
// least recently used session, session state or tier state, the cool-down
// whose next event is soonest), never by the time; evictions that depend on
// the time (an idle per-domain budget) are effects of their own.

// Kind names an effect's type in its encoding. Never renumber one: a
// replica of another release decodes by these numbers.
type Kind uint8

// The kinds of effect.
const (
	// KindProxyPut: a proxy as the feed reports it (new or changed).
	KindProxyPut Kind = 1 + iota
	// KindProxyDelete: a proxy the feed no longer reports.
	KindProxyDelete
	// KindGrant: a new lease.
	KindGrant
	// KindJoin: a session's acquire joined its live lease.
	KindJoin
	// KindRenew: a live lease extended.
	KindRenew
	// KindEnd: a live lease ended early (released, revoked, superseded).
	KindEnd
	// KindExpire: a lease (live or a tombstone) reached its expiry.
	KindExpire
	// KindTombstone: an ended lease's ID kept until its expiry.
	KindTombstone
	// KindRelearn: a lease of a previous term learnt from its ID.
	KindRelearn
	// KindOutcomeCount: outcomes counted (a release's, or a holder's report).
	KindOutcomeCount
	// KindBan: a proxy banned for a domain.
	KindBan
	// KindCooldownLapse: a cool-down stopped being in force.
	KindCooldownLapse
	// KindCooldownDrop: a cool-down's strikes all decayed; it is forgotten.
	KindCooldownDrop
	// KindSessionDrop: a sticky session forgotten (idle, or on request).
	KindSessionDrop
	// KindStatePut: session state kept (or dropped, when empty).
	KindStatePut
	// KindPolicyPut: a crawl policy applied (new or changed).
	KindPolicyPut
	// KindPolicyDelete: a crawl policy no longer applied.
	KindPolicyDelete
	// KindBudgetEvict: an idle per-domain budget evicted to make room.
	KindBudgetEvict
	// KindPoliteNote: an acquire waited for, or was refused by, a budget.
	KindPoliteNote
	// KindRefusal: an acquire refused because nothing matching was free.
	KindRefusal
	// KindPoolForget: a deleted pool's counts dropped.
	KindPoolForget
	// KindTermStart: a term begins (Lead).
	KindTermStart
	// KindTermEnd: the term ends (Abdicate).
	KindTermEnd
	// KindHorizon: the horizon moved.
	KindHorizon
	// KindRecovered: the recovery after a leader change is over.
	KindRecovered
	// KindPromoted: a follower became the store that decides.
	KindPromoted

	// kindCount is one past the last kind.
	kindCount
)

var kindNames = [kindCount]string{
	KindProxyPut: "ProxyPut", KindProxyDelete: "ProxyDelete", KindGrant: "Grant", KindJoin: "Join",
	KindRenew: "Renew", KindEnd: "End", KindExpire: "Expire", KindTombstone: "Tombstone", KindRelearn: "Relearn",
	KindOutcomeCount: "OutcomeCount", KindBan: "Ban", KindCooldownLapse: "CooldownLapse", KindCooldownDrop: "CooldownDrop",
	KindSessionDrop: "SessionDrop", KindStatePut: "StatePut", KindPolicyPut: "PolicyPut",
	KindPolicyDelete: "PolicyDelete", KindBudgetEvict: "BudgetEvict", KindPoliteNote: "PoliteNote",
	KindRefusal: "Refusal", KindPoolForget: "PoolForget", KindTermStart: "TermStart", KindTermEnd: "TermEnd",
	KindHorizon: "Horizon", KindRecovered: "Recovered", KindPromoted: "Promoted",
}

func (k Kind) String() string {
	if k == 0 || k >= kindCount {
		return "Unknown"
	}
	return kindNames[k]
}

// Kinds lists every kind of effect.
func Kinds() []Kind {
	out := make([]Kind, 0, kindCount-1)
	for k := KindProxyPut; k < kindCount; k++ {
		out = append(out, k)
	}
	return out
}

// Effect is one change to the store's state (see the top of this file).
type Effect interface {
	Kind() Kind
}

// Journal receives every effect the store applies, encoded, in order,
// under its lock: it must be quick and must not call back into the store.
// Nil: none.
type Journal interface {
	// Append takes one effect's encoding; b is valid only during the call.
	// renewal marks a renewal that keeps its lease's TTL: it only moves the
	// expiry, which a new leader makes up for (Store.Promote), so a replica
	// may leave it out of its log.
	Append(b []byte, renewal bool)
	// Seal ends one decision's effects and returns what the decision's
	// caller waits on before it answers: nil when there is nothing to wait
	// for.
	Seal() Pending
}

// Pending is one decision's effects on their way to being kept.
type Pending interface {
	// Wait returns once they are kept, or an error when they may not be.
	Wait(ctx context.Context) error
}

// ProxyPut sets a proxy's info. Apply starts the proxy afresh where the
// info says it is another one: a new UID forgets its cool-downs, burn and
// place in the order; a new ProviderID (a new instance) its cool-downs and
// burn. The leases that must end with the change end first, by KindEnd.
type ProxyPut struct{ info ProxyInfo }

// ProxyDelete forgets a proxy; its leases ended first, by KindEnd.
type ProxyDelete struct{ key ObjectName }

// Grant installs a new lease, charges it to its budget and tier, and uses
// its session.
type Grant struct {
	lease token
	tier  tierNote
	// requestID is the acquire's (AcquireRequest.RequestID), "" for none.
	requestID string
}

// tierNote is the tier a grant was made on, for the tier state of its
// budget; zero tiering means untiered.
type tierNote struct {
	key   budgetKey
	tier  int
	probe bool
	// tiered: the grant went through a tier choice.
	tiered bool
}

// Join extends a session's live lease for another acquire of the session.
type Join struct {
	key       leaseKey
	expiresAt time.Time
	ttl       time.Duration
	at        time.Time
}

// Renew extends a live lease to expiresAt.
type Renew struct {
	key       leaseKey
	expiresAt time.Time
	ttl       time.Duration
	at        time.Time
}

// End ends a live lease before its expiry: released (how is one of
// EndReleasedOK, EndReleasedBanned, EndReleasedError), revoked or
// superseded. tombstone is the state its ID keeps until the expiry
// (stateLive: none, the lease is forgotten).
type End struct {
	key       leaseKey
	how       string
	at        time.Time
	tombstone leaseState
}

// Expire: the lease key (live or a tombstone) reached its expiry.
type Expire struct{ key leaseKey }

// Tombstone records (or re-states) an ended lease's ID until its expiry,
// for a lease this store never held live or one already over.
type Tombstone struct {
	lease token
	state leaseState
}

// Relearn installs a lease of a previous term from its ID.
type Relearn struct {
	lease token
	at    time.Time
}

// OutcomeCount counts n outcomes and bytes moved on a proxy for a domain:
// a release's one outcome, or the requests and bytes a holder reports.
// lease, when set, is the live lease the report is charged to.
type OutcomeCount struct {
	proxy   ObjectName
	uid     types.UID
	lease   leaseKey
	outcome Outcome
	domain  string
	n       int64
	bytes   int64
	at      time.Time
}

// Ban starts or extends the cool-down of a proxy for a domain, counts the
// ban in its instance's burn and drops owner's session state there.
type Ban struct {
	proxy  ObjectName
	uid    types.UID
	domain string
	owner  string
	at     time.Time
}

// CooldownLapse: a cool-down's time is up; it stays remembered.
type CooldownLapse struct{ key cooldownKey }

// CooldownDrop: a cool-down's strikes have decayed; it is forgotten.
type CooldownDrop struct{ key cooldownKey }

// SessionDrop forgets a sticky session's choice.
type SessionDrop struct {
	key sessionKey
	// idle: it went for lack of use (not on request).
	idle bool
}

// StatePut keeps blob under key (an empty blob drops it).
type StatePut struct {
	key  stateKey
	blob []byte
}

// PolicyPut applies a crawl policy at the time at.
type PolicyPut struct {
	policy CrawlPolicy
	at     time.Time
}

// PolicyDelete stops applying a crawl policy at the time at.
type PolicyDelete struct {
	key ObjectName
	at  time.Time
}

// BudgetEvict drops an idle per-domain budget to make room for another.
type BudgetEvict struct{ key budgetKey }

// PoliteNote counts an acquire that waited for (or was refused by) a rule's budget.
type PoliteNote struct {
	rule    budgetKey
	refused bool
}

// Refusal remembers an acquire refused because nothing matching was free,
// for the pools' autoscalers (encoded as the selector's String()).
type Refusal struct {
	namespace, holder string
	selector          labels.Selector
	at                time.Time
}

// PoolForget drops a deleted pool's counts.
type PoolForget struct{ pool ObjectName }

// TermStart begins a term: the store grants from now on (see Store.Lead).
type TermStart struct {
	epoch        uint64
	recoverUntil time.Time
	recovering   bool
	horizon      time.Time
}

// TermEnd ends the term: every lease is forgotten (see Store.Abdicate).
type TermEnd struct{}

// Horizon moves the horizon to at.
type Horizon struct{ at time.Time }

// Recovered ends the recovery after a leader change.
type Recovered struct{}

// Promoted: a follower became the store that decides, at the time at of
// its clock, which may be up to skew behind the previous leader's. No
// lease ends early for it: every live lease is extended to at least its
// TTL plus skew from at (its renewals on the previous leader need not have
// been logged), the sessions of live leases are fresh, and the ends of
// cool-downs and the budgets' last grants move on by skew, so politeness
// only gets stricter across the change.
type Promoted struct {
	at   time.Time
	skew time.Duration
}

func (ProxyPut) Kind() Kind      { return KindProxyPut }
func (ProxyDelete) Kind() Kind   { return KindProxyDelete }
func (Grant) Kind() Kind         { return KindGrant }
func (Join) Kind() Kind          { return KindJoin }
func (Renew) Kind() Kind         { return KindRenew }
func (End) Kind() Kind           { return KindEnd }
func (Expire) Kind() Kind        { return KindExpire }
func (Tombstone) Kind() Kind     { return KindTombstone }
func (Relearn) Kind() Kind       { return KindRelearn }
func (OutcomeCount) Kind() Kind  { return KindOutcomeCount }
func (Ban) Kind() Kind           { return KindBan }
func (CooldownLapse) Kind() Kind { return KindCooldownLapse }
func (CooldownDrop) Kind() Kind  { return KindCooldownDrop }
func (SessionDrop) Kind() Kind   { return KindSessionDrop }
func (StatePut) Kind() Kind      { return KindStatePut }
func (PolicyPut) Kind() Kind     { return KindPolicyPut }
func (PolicyDelete) Kind() Kind  { return KindPolicyDelete }
func (BudgetEvict) Kind() Kind   { return KindBudgetEvict }
func (PoliteNote) Kind() Kind    { return KindPoliteNote }
func (Refusal) Kind() Kind       { return KindRefusal }
func (PoolForget) Kind() Kind    { return KindPoolForget }
func (TermStart) Kind() Kind     { return KindTermStart }
func (TermEnd) Kind() Kind       { return KindTermEnd }
func (Horizon) Kind() Kind       { return KindHorizon }
func (Recovered) Kind() Kind     { return KindRecovered }
func (Promoted) Kind() Kind      { return KindPromoted }
