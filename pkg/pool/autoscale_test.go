package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func autoscalePolicy(change ...func(*AutoscalePolicy)) AutoscalePolicy {
	p := AutoscalePolicy{Min: 0, Max: 20, TargetPercent: 80, SlotsPerMember: 1, ScaleDownDelay: 5 * time.Minute,
		ScaleUpMaxStep: 4, ScaleUpPercent: 100, ScaleUpPeriod: 15 * time.Second}
	for _, c := range change {
		c(&p)
	}
	return p
}

func TestWantedReplicas(t *testing.T) {
	for name, tc := range map[string]struct {
		pol               AutoscalePolicy
		demand            Demand
		wanted, unbounded int
	}{
		"no demand, min 0":                       {pol: autoscalePolicy(), wanted: 0, unbounded: 0},
		"no demand, min 2":                       {pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Min = 2 }), wanted: 2},
		"8 held at 80% of one slot: 10":          {pol: autoscalePolicy(), demand: Demand{Held: 8}, wanted: 10, unbounded: 10},
		"9 slots at 80%: 12 (rounded up)":        {pol: autoscalePolicy(), demand: Demand{Held: 5, Waiting: 3, Refused: 1}, wanted: 12, unbounded: 12},
		"3 waiting at 100%: 3":                   {pol: autoscalePolicy(func(p *AutoscalePolicy) { p.TargetPercent = 100 }), demand: Demand{Waiting: 3}, wanted: 3, unbounded: 3},
		"3 waiting at 80%: 4":                    {pol: autoscalePolicy(), demand: Demand{Waiting: 3}, wanted: 4, unbounded: 4},
		"two slots per member: 8 held → 5":       {pol: autoscalePolicy(func(p *AutoscalePolicy) { p.SlotsPerMember = 2 }), demand: Demand{Held: 8}, wanted: 5, unbounded: 5},
		"beyond max: capped":                     {pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Max = 4 }), demand: Demand{Held: 8}, wanted: 4, unbounded: 10},
		"one waiter at 80%: 2 (1.25 rounded up)": {pol: autoscalePolicy(), demand: Demand{Waiting: 1}, wanted: 2, unbounded: 2},
		"target 1%: one slot asks for 100":       {pol: autoscalePolicy(func(p *AutoscalePolicy) { p.TargetPercent = 1; p.Max = 1000 }), demand: Demand{Held: 1}, wanted: 100, unbounded: 100},
	} {
		t.Run(name, func(t *testing.T) {
			wanted, unbounded := WantedReplicas(tc.pol, tc.demand)
			if tc.unbounded == 0 {
				tc.unbounded = unbounded // only checked where the row says
			}
			if diff := cmp.Diff([2]int{tc.wanted, tc.unbounded}, [2]int{wanted, unbounded}); diff != "" {
				t.Errorf("(wanted, unbounded) (-want +got):\n%s", diff)
			}
		})
	}
}

// step is one call of Autoscale at an offset from t0.
type step struct {
	at      time.Duration
	demand  Demand
	current int // -1: the previous step's Desired
	want    int
	reason  string
	requeue time.Duration // checked when set
}

func TestAutoscale(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		pol   AutoscalePolicy
		steps []step
	}{
		"scale from zero: three waiters, target 100, grow at once to 3": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Max = 4; p.TargetPercent = 100 }),
			steps: []step{
				{at: 0, demand: Demand{}, current: 0, want: 0, reason: ReasonStable},
				{at: time.Second, demand: Demand{Waiting: 3}, current: -1, want: 3, reason: ReasonScaledUp},
				{at: 5 * time.Second, demand: Demand{Held: 3}, current: -1, want: 3, reason: ReasonStable},
			},
		},
		"released: back to zero only after scaleDownDelay": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Max = 4; p.TargetPercent = 100; p.ScaleDownDelay = 20 * time.Second }),
			steps: []step{
				{at: 0, demand: Demand{Held: 3}, current: 3, want: 3, reason: ReasonStable},
				{at: 10 * time.Second, demand: Demand{}, current: -1, want: 3, reason: ReasonScaleDownDelayed, requeue: 10 * time.Second},
				{at: 25 * time.Second, demand: Demand{}, current: -1, want: 0, reason: ReasonScaledDownDemand},
			},
		},
		"a blip of demand during the delay restarts it": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.TargetPercent = 100; p.ScaleDownDelay = 20 * time.Second }),
			steps: []step{
				{at: 0, demand: Demand{Held: 2}, current: 2, want: 2, reason: ReasonStable},
				{at: 10 * time.Second, demand: Demand{}, current: -1, want: 2, reason: ReasonScaleDownDelayed},
				{at: 15 * time.Second, demand: Demand{Held: 2}, current: -1, want: 2, reason: ReasonStable},
				{at: 25 * time.Second, demand: Demand{}, current: -1, want: 2, reason: ReasonScaleDownDelayed},
				{at: 36 * time.Second, demand: Demand{}, current: -1, want: 0, reason: ReasonScaledDownDemand},
			},
		},
		"shrinks to the highest demand within the delay, not below": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.TargetPercent = 100; p.ScaleDownDelay = 20 * time.Second }),
			steps: []step{
				{at: 0, demand: Demand{Held: 6}, current: 6, want: 6, reason: ReasonStable},
				{at: 10 * time.Second, demand: Demand{Held: 4}, current: -1, want: 6, reason: ReasonScaleDownDelayed},
				{at: 15 * time.Second, demand: Demand{Held: 1}, current: -1, want: 6, reason: ReasonScaleDownDelayed},
				{at: 21 * time.Second, demand: Demand{Held: 1}, current: -1, want: 4, reason: ReasonScaledDownDemand},
				{at: 36 * time.Second, demand: Demand{Held: 1}, current: -1, want: 1, reason: ReasonScaledDownDemand},
			},
		},
		"steady 8 held at 80%: 1 → 5 → 10, then stays": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Min = 1 }),
			steps: []step{
				{at: 0, demand: Demand{Held: 1, Waiting: 7}, current: 1, want: 5, reason: ReasonScaleUpLimited, requeue: 15 * time.Second},
				{at: 5 * time.Second, demand: Demand{Held: 5, Waiting: 3}, current: -1, want: 5, reason: ReasonScaleUpLimited, requeue: 10 * time.Second},
				{at: 15 * time.Second, demand: Demand{Held: 5, Waiting: 3}, current: -1, want: 10, reason: ReasonScaledUp},
				{at: 20 * time.Second, demand: Demand{Held: 8}, current: -1, want: 10, reason: ReasonStable},
				{at: 2 * time.Minute, demand: Demand{Held: 8}, current: -1, want: 10, reason: ReasonStable},
				{at: 10 * time.Minute, demand: Demand{Held: 8}, current: -1, want: 10, reason: ReasonStable},
			},
		},
		"percent beats maxStep on a big pool": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Max = 100; p.TargetPercent = 100 }),
			steps: []step{
				{at: 0, demand: Demand{Held: 10, Waiting: 40}, current: 10, want: 20, reason: ReasonScaleUpLimited},
			},
		},
		"demand beyond max: at maximum": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Max = 4; p.TargetPercent = 100 }),
			steps: []step{
				{at: 0, demand: Demand{Waiting: 9}, current: 0, want: 4, reason: ReasonAtMaximum},
				{at: time.Second, demand: Demand{Held: 4, Waiting: 5}, current: -1, want: 4, reason: ReasonAtMaximum},
			},
		},
		"a new leader does not shrink before a full delay": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.ScaleDownDelay = time.Minute }),
			steps: []step{
				{at: 0, demand: Demand{}, current: 5, want: 5, reason: ReasonScaleDownDelayed, requeue: time.Minute},
				{at: 61 * time.Second, demand: Demand{}, current: -1, want: 0, reason: ReasonScaledDownDemand},
			},
		},
		"bounds changed: into them at once": {
			pol: autoscalePolicy(func(p *AutoscalePolicy) { p.Min = 2; p.Max = 3 }),
			steps: []step{
				{at: 0, demand: Demand{}, current: 7, want: 3, reason: ReasonScaledDownDemand},
				{at: time.Second, demand: Demand{}, current: 0, want: 2, reason: ReasonScaledUp},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var h AutoscaleHistory
			current := 0
			for i, s := range tc.steps {
				if s.current >= 0 {
					current = s.current
				}
				var dec AutoscaleDecision
				dec, h = Autoscale(tc.pol, current, s.demand, h, t0.Add(s.at))
				if dec.Desired != s.want || dec.Reason != s.reason {
					t.Errorf("step %d (%v, %+v, current %d): desired %d (%s), want %d (%s); %s", i, s.at, s.demand, current, dec.Desired, dec.Reason, s.want, s.reason, dec.Message)
				}
				if s.requeue != 0 && dec.RequeueAfter != s.requeue {
					t.Errorf("step %d: requeue after %v, want %v", i, dec.RequeueAfter, s.requeue)
				}
				current = dec.Desired
			}
		})
	}
}

// TestAutoscaleDoesNotFlapUnderSteadyDemand drives the decision every
// 5 s for 30 minutes of constant demand, from several starting sizes: after
// it first reaches the wanted size it never changes again.
func TestAutoscaleDoesNotFlapUnderSteadyDemand(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pol := autoscalePolicy(func(p *AutoscalePolicy) { p.Min = 1; p.ScaleDownDelay = time.Minute })
	for _, start := range []int{1, 4, 10, 15, 20} {
		var h AutoscaleHistory
		current, changes, reached := start, 0, false
		for at := time.Duration(0); at < 30*time.Minute; at += 5 * time.Second {
			var dec AutoscaleDecision
			dec, h = Autoscale(pol, current, Demand{Held: 8}, h, t0.Add(at))
			if dec.Desired != current {
				changes++
				if reached {
					t.Errorf("start %d: changed from %d to %d at %v after settling", start, current, dec.Desired, at)
				}
			}
			current = dec.Desired
			reached = reached || current == 10
		}
		if current != 10 || changes > 2 {
			t.Errorf("start %d: ended at %d after %d changes, want 10 within 2", start, current, changes)
		}
	}
}
