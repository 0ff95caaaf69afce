package pool

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Reason says why a member is removed; it is the event reason and the
// value of the drain-reason annotation.
type Reason string

const (
	ReasonOutOfDate  Reason = "OutOfDate"
	ReasonTooOld     Reason = "TooOld"
	ReasonUnhealthy  Reason = "Unhealthy"
	ReasonScaledDown Reason = "ScaledDown"
	// ReasonDuplicateExitIP: an older member leaves from the same exit IP,
	// so the two are one IP to the sites; the younger is re-rolled.
	ReasonDuplicateExitIP Reason = "DuplicateExitIP"
	// ReasonExitCountryMismatch: a proxy network's session leaves from
	// another country than the {country} its username asked for; it is
	// re-rolled (a new session, a new IP).
	ReasonExitCountryMismatch Reason = "ExitCountryMismatch"
)

// Member is what the plan needs to know of one member.
type Member struct {
	Name     string
	Revision string
	Created  time.Time
	// Ready: phase Ready.
	Ready bool
	// UnhealthySince is when the member's phase became Unhealthy, or, for a
	// member stuck short of Ready (Pending, Provisioning, Failed: Starting),
	// when its Provisioned condition last changed; zero while Ready.
	UnhealthySince time.Time
	// Starting: not Ready and not Unhealthy either (an instance that does
	// not come up or stopped answering its provider). It counts as
	// unhealthy only once past unhealthyTimeout, so that the members a
	// rollout is creating do not trip the maxUnhealthy short-circuit.
	Starting bool
	// DrainingSince is when the pool marked it for removal; zero if not.
	DrainingSince time.Time
	// Deleting: the Proxy is being deleted (its instance may still exist).
	Deleting bool
	// Leases is how many live leases hold it; -1 when unknown (the lease
	// store is not leading): a draining member then waits for drainTimeout.
	Leases int
	// Served and BannedDomains are the lease store's record of the
	// member's instance, for spec.recycle (recycle.go); zero when unknown.
	Served        int64
	BannedDomains int
	// ExitIP is the address sites see it come from (status.exitIP), "" if
	// not measured.
	ExitIP string
	// ExitCountry is status.exitCountry, "" if unknown; AskedCountry the
	// country its proxy network was asked for (upstream.AskedCountry), ""
	// if none.
	ExitCountry, AskedCountry string
}

// countryMismatch: the member is known to leave from another country than
// the one it asked its network for.
func (m Member) countryMismatch() bool {
	return m.Ready && m.AskedCountry != "" && m.ExitCountry != "" && m.ExitCountry != m.AskedCountry
}

func (m Member) draining() bool  { return !m.DrainingSince.IsZero() }
func (m Member) unhealthy() bool { return !m.UnhealthySince.IsZero() }
func (m Member) active() bool    { return !m.Deleting && !m.draining() }

// Policy is a pool's spec resolved to numbers.
type Policy struct {
	Replicas         int
	MaxSurge         int
	MaxUnavailable   int
	MaxAge           time.Duration // 0: never recycled for age
	DrainTimeout     time.Duration
	UnhealthyTimeout time.Duration
	MaxUnhealthy     int
	Revision         string
	Recycle          RecyclePolicy // zero: no recycling on evidence
	// KeepDuplicates: members that share an exit IP stay (DecideDuplicates
	// said not to re-roll now).
	KeepDuplicates bool
}

// ResolvePolicy rounds the strategy as a Deployment does: maxSurge up,
// maxUnavailable down, and when both come to zero maxUnavailable becomes 1
// (a percentage of a small pool may round to nothing, and a rollout must
// still move). maxUnhealthy rounds down, as MachineHealthCheck's does.
func ResolvePolicy(replicas int, maxSurge, maxUnavailable, maxUnhealthy *intstr.IntOrString) (surge, unavailable, unhealthy int, err error) {
	if surge, err = scaled(maxSurge, replicas, true, 1); err != nil {
		return 0, 0, 0, fmt.Errorf("spec.strategy.maxSurge: %w", err)
	}
	if unavailable, err = scaled(maxUnavailable, replicas, false, 0); err != nil {
		return 0, 0, 0, fmt.Errorf("spec.strategy.maxUnavailable: %w", err)
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	if unhealthy, err = scaled(maxUnhealthy, replicas, false, replicas*40/100); err != nil {
		return 0, 0, 0, fmt.Errorf("spec.remediation.maxUnhealthy: %w", err)
	}
	return surge, unavailable, unhealthy, nil
}

func scaled(v *intstr.IntOrString, total int, roundUp bool, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%s is negative", v.String())
	}
	return n, nil
}

// Removal is one member the plan takes out, and why.
type Removal struct {
	Name   string
	Reason Reason
	// Leases the member held when it was chosen (-1: unknown).
	Leases int
	// Evidence says what made a Burned or UsedUp member go; "" otherwise.
	Evidence string
}

// Deletion is a member deleted now, and what ended its drain.
type Deletion struct {
	Name string
	// Why: "drained" (no lease left), "drain timeout" or "not ready".
	Why    string
	Reason Reason
	// Evidence as in Removal.
	Evidence string
}

// Plan is what one sync of a pool does.
type Plan struct {
	// Create is how many new members to make from the current revision.
	Create int
	// Drain are members to mark draining (they keep their live leases).
	Drain []Removal
	// Delete are members to delete now.
	Delete []Deletion
	// Counts as the plan found them, before it acts.
	Counts Counts
	// RemediationPaused: more members are Unhealthy than maxUnhealthy.
	RemediationPaused bool
	// Waiting says what holds the rollout back, for the Progressing condition.
	Waiting string
	// Complete: every member is up to date, none is leaving, the count is right.
	Complete bool
	// RequeueAfter is when time alone changes the plan (a drain timeout, a
	// member reaching maxAge or unhealthyTimeout); 0 means only events do.
	RequeueAfter time.Duration
}

// Counts are the pool's members by state.
type Counts struct {
	Total        int // every member that exists, leaving ones included
	Ready        int // phase Ready, not being deleted
	Available    int // Ready and not draining
	Updated      int // active, current revision, not too old
	Draining     int
	Deleting     int // being deleted; their instances may still exist
	Unhealthy    int // active members whose phase is Unhealthy
	OutOfDate    int
	MinAvailable int
	MaxTotal     int
}

// AgeLimit is the age at which a member is recycled: maxAge less up to a
// tenth, by a hash of its name, so members created together leave apart
// and none outlives maxAge.
func AgeLimit(name string, maxAge time.Duration) time.Duration {
	if maxAge <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	frac := float64(h.Sum32()) / float64(math.MaxUint32)
	return maxAge - time.Duration(frac*float64(maxAge)/10)
}

// Decide is the pool's whole decision, pure: which members to create, drain
// and delete now. One budget covers rollout, age recycling, remediation and
// scale-down: at most replicas+maxSurge members exist, and a Ready member
// is only taken out while at least replicas-maxUnavailable stay available.
func Decide(pol Policy, members []Member, now time.Time) Plan {
	var plan Plan
	var next wakeup
	plan.Counts = countMembers(pol, members, now)
	c := &plan.Counts
	plan.RemediationPaused = c.Unhealthy > pol.MaxUnhealthy
	plan.Delete = drained(pol, members, now, &next)
	keep, stale := sortActive(pol, members, now, plan.RemediationPaused, c, &next)
	removed := planRemovals(pol, keep, stale, &plan)
	planCreations(pol, len(keep), &plan)
	active := len(keep) + len(stale)
	plan.Complete = len(stale) == 0 && c.Draining == 0 && active == pol.Replicas && c.Total == pol.Replicas &&
		removed == 0 && len(plan.Delete) == 0
	plan.RequeueAfter = time.Duration(next)
	return plan
}

// wakeup is the soonest positive duration a step asked to look again after.
type wakeup time.Duration

func (w *wakeup) at(d time.Duration) {
	if d > 0 && (*w == 0 || d < time.Duration(*w)) {
		*w = wakeup(d)
	}
}

// candidate is an active member, and why it must go ("" to keep it).
type candidate struct {
	Member
	reason Reason
}

// countMembers counts the members by state, and the budget's bounds.
func countMembers(pol Policy, members []Member, now time.Time) Counts {
	c := Counts{
		MinAvailable: max(0, pol.Replicas-pol.MaxUnavailable),
		MaxTotal:     pol.Replicas + pol.MaxSurge,
		Total:        len(members),
	}
	for _, m := range members {
		if m.Deleting {
			c.Deleting++
			continue
		}
		if m.Ready {
			c.Ready++
			if !m.draining() {
				c.Available++
			}
		}
		if m.draining() {
			c.Draining++
		} else if m.unhealthy() && (!m.Starting || now.Sub(m.UnhealthySince) >= pol.UnhealthyTimeout) {
			c.Unhealthy++
		}
	}
	return c
}

// drained are the draining members that leave now: their last lease ended
// or the drain timeout passed. The others are looked at again at theirs.
func drained(pol Policy, members []Member, now time.Time, next *wakeup) []Deletion {
	var out []Deletion
	for _, m := range members {
		if m.Deleting || !m.draining() {
			continue
		}
		waited := now.Sub(m.DrainingSince)
		switch {
		case m.Leases == 0:
			out = append(out, Deletion{Name: m.Name, Why: "drained"})
		case waited >= pol.DrainTimeout:
			out = append(out, Deletion{Name: m.Name, Why: "drain timeout"})
		default:
			next.at(pol.DrainTimeout - waited)
		}
	}
	return out
}

// sortActive splits the active members into those to keep and the stale
// ones to replace (out of date, too old, unhealthy too long, or burned),
// each in victim order, and counts the out-of-date and updated ones.
func sortActive(pol Policy, members []Member, now time.Time, remediationPaused bool, c *Counts, next *wakeup) (keep, stale []candidate) {
	duplicates := duplicateExitIPs(members)
	for _, m := range members {
		if !m.active() {
			continue
		}
		reason := Reason("")
		switch {
		case m.Revision != pol.Revision:
			reason = ReasonOutOfDate
			c.OutOfDate++
		case pol.MaxAge > 0 && now.Sub(m.Created) >= AgeLimit(m.Name, pol.MaxAge):
			reason = ReasonTooOld
		case duplicates[m.Name] && !pol.KeepDuplicates:
			reason = ReasonDuplicateExitIP
		case m.countryMismatch():
			reason = ReasonExitCountryMismatch
		case m.unhealthy() && !remediationPaused && now.Sub(m.UnhealthySince) >= pol.UnhealthyTimeout:
			reason = ReasonUnhealthy
		default:
			reason = RecycleReason(pol.Recycle, m)
		}
		if reason != "" {
			stale = append(stale, candidate{Member: m, reason: reason})
			continue
		}
		c.Updated++
		keep = append(keep, candidate{Member: m})
		if pol.MaxAge > 0 {
			next.at(AgeLimit(m.Name, pol.MaxAge) - now.Sub(m.Created))
		}
		if m.unhealthy() && !remediationPaused {
			next.at(pol.UnhealthyTimeout - now.Sub(m.UnhealthySince))
		}
	}
	slices.SortFunc(stale, func(a, b candidate) int { return victimOrder(a.Member, b.Member) })
	slices.SortFunc(keep, func(a, b candidate) int { return victimOrder(a.Member, b.Member) })
	return keep, stale
}

// planRemovals removes every stale member, then keepers beyond replicas
// (scale-down): a Ready one is drained only while the budget's minimum
// stays available, one not Ready is deleted at once (it serves no lease,
// so it costs no availability). It returns how many it removed.
func planRemovals(pol Policy, keep, stale []candidate, plan *Plan) int {
	c := &plan.Counts
	removals := stale
	if excess := len(keep) - pol.Replicas; excess > 0 {
		for _, k := range keep[:excess] {
			removals = append(removals, candidate{Member: k.Member, reason: ReasonScaledDown})
		}
	}
	available := c.Available
	removed := 0
	for _, r := range removals {
		evidence := RecycleEvidence(pol.Recycle, r.reason, r.Member)
		if !r.Ready {
			removed++
			plan.Delete = append(plan.Delete, Deletion{Name: r.Name, Why: "not ready", Reason: r.reason, Evidence: evidence})
			continue
		}
		if available-1 < c.MinAvailable {
			plan.Waiting = fmt.Sprintf("waiting for members to become Ready: %d available, at least %d must stay available", available, c.MinAvailable)
			continue
		}
		available--
		removed++
		plan.Drain = append(plan.Drain, Removal{Name: r.Name, Reason: r.reason, Leases: r.Leases, Evidence: evidence})
	}
	return removed
}

// planCreations fills up to replicas, within replicas+maxSurge members in
// all; members leaving in this sync still exist until their Proxy is gone.
func planCreations(pol Policy, kept int, plan *Plan) {
	c := &plan.Counts
	want := pol.Replicas - kept
	if want <= 0 {
		return
	}
	room := c.MaxTotal - c.Total
	plan.Create = max(0, min(want, room))
	if plan.Create < want && plan.Waiting == "" {
		plan.Waiting = fmt.Sprintf("waiting for members to leave: %d exist, at most %d may", c.Total, c.MaxTotal)
	}
}

// victimOrder sorts the members to remove first: not Ready, then unleased,
// then fewest leases, then oldest (a careful ReplicaSet's order, with
// leases standing in for the pods' cost of going).
func victimOrder(a, b Member) int {
	if a.Ready != b.Ready {
		if !a.Ready {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(max(a.Leases, 0), max(b.Leases, 0)); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// duplicateExitIPs names the active Ready members whose exit IP an older
// one (by creation, then name) has already: to a site they are one IP.
func duplicateExitIPs(members []Member) map[string]bool {
	var measured []Member
	for _, m := range members {
		if m.active() && m.Ready && m.ExitIP != "" {
			measured = append(measured, m)
		}
	}
	slices.SortFunc(measured, func(a, b Member) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	seen := map[string]bool{}
	dup := map[string]bool{}
	for _, m := range measured {
		if seen[m.ExitIP] {
			dup[m.Name] = true
		}
		seen[m.ExitIP] = true
	}
	return dup
}
