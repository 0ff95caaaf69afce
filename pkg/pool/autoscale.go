package pool

import (
	"fmt"
	"time"
)

// The autoscaler's decision, pure: how many members a pool's lease demand
// asks for, bounded by min/max, by the scale-up limit per period, and held
// up on the way down by the scale-down delay. The controller keeps the
// history between calls (autoscale_sync.go); this file does no I/O.

// Autoscaling condition reasons (and event reasons for the two that act).
const (
	ReasonScaledUp         = "ScaledUp"
	ReasonScaledDownDemand = "ScaledDown"
	ReasonScaleUpLimited   = "ScaleUpLimited"
	ReasonScaleDownDelayed = "ScaleDownDelayed"
	ReasonAtMaximum        = "AtMaximum"
	ReasonStable           = "Stable"
	ReasonDemandUnknown    = "DemandUnknown"
	ReasonFailedScale      = "FailedScale"
)

// AutoscalePolicy is spec.autoscaling resolved to numbers.
type AutoscalePolicy struct {
	Min, Max int
	// TargetPercent of the slots demand should fill (1..100).
	TargetPercent int
	// SlotsPerMember is the template's maxLeases (at least 1).
	SlotsPerMember int
	ScaleDownDelay time.Duration
	// Scale-up bound: per ScaleUpPeriod, at most the larger of
	// ScaleUpMaxStep members and ScaleUpPercent of the size at the
	// period's start.
	ScaleUpMaxStep int
	ScaleUpPercent int
	ScaleUpPeriod  time.Duration
}

// Demand is a pool's lease demand in slots.
type Demand struct {
	// Held slots on the pool's members.
	Held int
	// Waiting acquires a member would serve.
	Waiting int
	// Refused distinct holders within the refusal window.
	Refused int
}

// Slots is the demand in lease slots.
func (d Demand) Slots() int { return d.Held + d.Waiting + d.Refused }

// Recommendation is what demand asked for at one moment.
type Recommendation struct {
	At       time.Time
	Replicas int
}

// ScaleUp is one growth the autoscaler made.
type ScaleUp struct {
	At       time.Time
	From, To int
}

// AutoscaleHistory is what the decision remembers between calls: the
// recommendations within the scale-down delay and the scale-ups within the
// scale-up period. It is memory only; an empty history (a new leader) is
// seeded with the current size, so a scale-down waits a full delay.
type AutoscaleHistory struct {
	Recommendations []Recommendation
	ScaleUps        []ScaleUp
	// Seeded: the current size was recorded at the first call.
	Seeded bool
}

// AutoscaleDecision is the outcome of one call.
type AutoscaleDecision struct {
	// Desired is what spec.replicas should be.
	Desired int
	// Wanted is what demand alone asks for, within min and max.
	Wanted int
	// Reason and Message are for the Autoscaling condition and events.
	Reason  string
	Message string
	// RequeueAfter is when time alone changes the decision (a delayed
	// scale-down falling due, a scale-up period ending); 0: only demand does.
	RequeueAfter time.Duration
}

// WantedReplicas is the size demand asks for: enough members that the
// demanded slots fill TargetPercent of them, within min and max.
func WantedReplicas(pol AutoscalePolicy, d Demand) (wanted, unbounded int) {
	slots := max(1, pol.SlotsPerMember)
	target := min(max(1, pol.TargetPercent), 100)
	need := d.Slots()
	// ceil(need / (slots × target/100)), in integers.
	unbounded = (need*100 + slots*target - 1) / (slots * target)
	return min(max(unbounded, pol.Min), pol.Max), unbounded
}

// Autoscale decides the pool's size from its demand. current is
// spec.replicas now. It returns the decision and the history to keep.
// It reads better whole: up, down and hold are one decision over one
// history, and the condition's message quotes each branch's arithmetic.
func Autoscale(pol AutoscalePolicy, current int, d Demand, h AutoscaleHistory, now time.Time) (AutoscaleDecision, AutoscaleHistory) {
	wanted, unbounded := WantedReplicas(pol, d)
	h = pruneHistory(pol, h, now)
	if !h.Seeded {
		h.Recommendations = append(h.Recommendations, Recommendation{At: now, Replicas: current})
		h.Seeded = true
	}
	h.Recommendations = append(h.Recommendations, Recommendation{At: now, Replicas: wanted})
	dec := AutoscaleDecision{Desired: current, Wanted: wanted}
	story := fmt.Sprintf("%d slots held, %d acquires waiting, %d holders refused: %d slots wanted, %d members at %d%% of %d slots each",
		d.Held, d.Waiting, d.Refused, d.Slots(), unbounded, pol.TargetPercent, max(1, pol.SlotsPerMember))

	switch {
	case current < pol.Min || current > pol.Max:
		// Out of bounds (the bounds changed): go there at once.
		dec.Desired = min(max(current, pol.Min), pol.Max)
		dec.Reason = ReasonScaledUp
		if dec.Desired < current {
			dec.Reason = ReasonScaledDownDemand
		}
		dec.Message = fmt.Sprintf("%s; %d members is outside minReplicas %d..maxReplicas %d", story, current, pol.Min, pol.Max)
	case wanted > current:
		// Growth since the period began counts against the bound.
		grown := 0
		for _, u := range h.ScaleUps {
			grown += u.To - u.From
		}
		start := max(0, current-grown)
		limit := max(start+max(1, pol.ScaleUpMaxStep), start+(start*pol.ScaleUpPercent+99)/100)
		dec.Desired = min(wanted, max(limit, current))
		switch {
		case dec.Desired == current:
			dec.Reason = ReasonScaleUpLimited
			dec.Message = fmt.Sprintf("%s; already grew from %d to %d within %v (at most %d)", story, start, current, pol.ScaleUpPeriod, limit)
			if len(h.ScaleUps) > 0 {
				dec.RequeueAfter = h.ScaleUps[0].At.Add(pol.ScaleUpPeriod).Sub(now)
			}
		case dec.Desired < wanted:
			dec.Reason = ReasonScaleUpLimited
			dec.Message = fmt.Sprintf("%s; growing from %d to %d, at most %d within %v", story, current, dec.Desired, limit, pol.ScaleUpPeriod)
			dec.RequeueAfter = pol.ScaleUpPeriod
		default:
			dec.Reason = ReasonScaledUp
			dec.Message = fmt.Sprintf("%s; growing from %d to %d", story, current, dec.Desired)
		}
		if dec.Desired > current {
			h.ScaleUps = append(h.ScaleUps, ScaleUp{At: now, From: current, To: dec.Desired})
		}
	case wanted < current:
		// Shrink only to the most any recommendation within the delay asked
		// for; the oldest of those above wanted is the next to expire.
		highest, oldest := wanted, time.Time{}
		for _, r := range h.Recommendations {
			highest = max(highest, r.Replicas)
			if r.Replicas > wanted && (oldest.IsZero() || r.At.Before(oldest)) {
				oldest = r.At
			}
		}
		dec.Desired = min(current, highest)
		if dec.Desired < current {
			dec.Reason = ReasonScaledDownDemand
			dec.Message = fmt.Sprintf("%s; demand stayed below %d members for scaleDownDelay %v: shrinking to %d", story, current, pol.ScaleDownDelay, dec.Desired)
		} else {
			dec.Reason = ReasonScaleDownDelayed
			dec.Message = fmt.Sprintf("%s; shrinking to %d once demand has stayed low for scaleDownDelay %v", story, wanted, pol.ScaleDownDelay)
		}
		if dec.Desired > wanted && !oldest.IsZero() {
			dec.RequeueAfter = max(time.Second, oldest.Add(pol.ScaleDownDelay).Sub(now))
		}
	default:
		dec.Reason = ReasonStable
		if unbounded > pol.Max {
			dec.Reason = ReasonAtMaximum
			story += fmt.Sprintf(" (maxReplicas %d)", pol.Max)
		}
		dec.Message = story
	}
	if dec.Reason == ReasonScaledUp && unbounded > pol.Max && dec.Desired == pol.Max {
		dec.Reason = ReasonAtMaximum
		dec.Message += fmt.Sprintf(" (maxReplicas %d)", pol.Max)
	}
	return dec, h
}

// pruneHistory drops recommendations older than the scale-down delay and
// scale-ups older than the scale-up period.
func pruneHistory(pol AutoscalePolicy, h AutoscaleHistory, now time.Time) AutoscaleHistory {
	out := AutoscaleHistory{Seeded: h.Seeded}
	for _, r := range h.Recommendations {
		if now.Sub(r.At) < pol.ScaleDownDelay {
			out.Recommendations = append(out.Recommendations, r)
		}
	}
	for _, u := range h.ScaleUps {
		if now.Sub(u.At) < pol.ScaleUpPeriod {
			out.ScaleUps = append(out.ScaleUps, u)
		}
	}
	return out
}
