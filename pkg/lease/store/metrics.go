package store

import "time"

// Outcomes of an acquire, the label values of Metrics.ObserveAcquire.
const (
	// AcquireGranted: granted at once.
	AcquireGranted = "granted"
	// AcquireWaited: granted after waiting for capacity.
	AcquireWaited = "waited"
	// AcquireNoneFree: nothing matching had free capacity (503).
	AcquireNoneFree = "none_free"
	// AcquireCoolingDown: everything matching and free was cooling down for the domain (503).
	AcquireCoolingDown = "cooling_down"
	// AcquireRecovering: a new leader was not granting yet (503).
	AcquireRecovering = "recovering"
	// AcquireCanceled: the caller went away while waiting.
	AcquireCanceled = "canceled"
	// AcquireOwnerLimit: the caller's identity held MaxLeasesPerOwner leases (429).
	AcquireOwnerLimit = "owner_limit"
	// AcquireDomainLimited: a crawl policy's budget for the domain was used up (429).
	AcquireDomainLimited = "domain_limited"
	// AcquireSiteBanning: the domain's site banned too many distinct proxies lately (429).
	AcquireSiteBanning = "site_banning"
)

// AcquireOutcomes lists every acquire outcome, for pre-declaring series.
var AcquireOutcomes = []string{AcquireGranted, AcquireWaited, AcquireNoneFree, AcquireCoolingDown, AcquireRecovering, AcquireCanceled, AcquireOwnerLimit, AcquireDomainLimited, AcquireSiteBanning}

// How a lease ended, the label values of Metrics.ObserveLeaseEnd.
const (
	EndReleasedOK     = "released_ok"
	EndReleasedBanned = "released_banned"
	EndReleasedError  = "released_error"
	EndExpired        = "expired"
	EndRevoked        = "revoked"
	EndSuperseded     = "superseded"
)

// LeaseEnds lists every way a lease ends, for pre-declaring series.
var LeaseEnds = []string{EndReleasedOK, EndReleasedBanned, EndReleasedError, EndExpired, EndRevoked, EndSuperseded}

// Metrics receives the store's measurements; pkg/metrics implements it.
// Calls are made with the store's lock held: implementations must be quick
// and must not call back into the store.
type Metrics interface {
	// ObserveAcquire counts one finished acquire by outcome (AcquireOutcomes).
	ObserveAcquire(outcome string)
	// SetActiveLeases records how many leases are live on this replica.
	SetActiveLeases(n int)
	// ObserveLeaseEnd records how long a lease was held and how it ended (LeaseEnds).
	ObserveLeaseEnd(end string, held time.Duration)
	// SetCooldowns records how many (proxy, domain) cool-downs are in force.
	SetCooldowns(n int)
	// SetRecovering records whether this leader is refusing grants after a
	// leader change.
	SetRecovering(recovering bool)
}

// NoMetrics discards every measurement.
type NoMetrics struct{}

func (NoMetrics) ObserveAcquire(string)                 {}
func (NoMetrics) SetActiveLeases(int)                   {}
func (NoMetrics) ObserveLeaseEnd(string, time.Duration) {}
func (NoMetrics) SetCooldowns(int)                      {}
func (NoMetrics) SetRecovering(bool)                    {}

// The kinds of bounded state, the label values of StateMetrics.
const (
	StateSessions  = "sessions"
	StateCooldowns = "cooldowns"
	// StateDomainBudgets: the crawl policies' default-rule budgets, one
	// per domain (budgets.go).
	StateDomainBudgets = "domain_budgets"
)

// StateKinds lists every kind of bounded state, for pre-declaring series.
var StateKinds = []string{StateSessions, StateCooldowns, StateDomainBudgets, StateSessionStates, StateTiers, StateSiteBans}

// StateMetrics, when a Metrics implements it too, receives the size of the
// store's bounded state (sticky sessions, cool-down entries) and counts
// what the caps evicted. It is a separate interface so that existing
// Metrics implementations keep compiling.
type StateMetrics interface {
	// SetStateEntries records how many entries of kind are kept.
	SetStateEntries(kind string, n int)
	// ObserveStateEviction counts one entry of kind evicted by its cap.
	ObserveStateEviction(kind string)
}

func setStateEntries(m Metrics, kind string, n int) {
	if sm, ok := m.(StateMetrics); ok {
		sm.SetStateEntries(kind, n)
	}
}

func observeEviction(m Metrics, kind string) {
	if sm, ok := m.(StateMetrics); ok {
		sm.ObserveStateEviction(kind)
	}
}
