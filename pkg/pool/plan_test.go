package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type memberOption func(*Member)

// member is a Ready, unleased member of revision "new", created an hour before t0.
func member(name string, opts ...memberOption) Member {
	m := Member{Name: name, Revision: "new", Created: t0.Add(-time.Hour), Ready: true}
	for _, o := range opts {
		o(&m)
	}
	return m
}

func old(m *Member)      { m.Revision = "old" }
func notReady(m *Member) { m.Ready = false }
func deleting(m *Member) { m.Deleting = true; m.Ready = false }
func leases(n int) memberOption {
	return func(m *Member) { m.Leases = n }
}
func created(d time.Duration) memberOption { return func(m *Member) { m.Created = t0.Add(-d) } }
func drainingFor(d time.Duration) memberOption {
	return func(m *Member) { m.DrainingSince = t0.Add(-d) }
}
func starting(m *Member) { m.Starting = true }
func unhealthyFor(d time.Duration) memberOption {
	return func(m *Member) { m.Ready = false; m.UnhealthySince = t0.Add(-d) }
}

func members(n int, opts ...memberOption) []Member {
	var out []Member
	for i := range n {
		out = append(out, member(string(rune('a'+i)), opts...))
	}
	return out
}

func policy(replicas, surge, unavailable int) Policy {
	return Policy{Replicas: replicas, MaxSurge: surge, MaxUnavailable: unavailable, Revision: "new",
		DrainTimeout: 5 * time.Minute, UnhealthyTimeout: 5 * time.Minute, MaxUnhealthy: replicas * 40 / 100}
}

// planOf is the part of a Plan the table compares.
type planOf struct {
	Create int
	Drain  []Removal
	Delete []Deletion
	Paused bool
}

func TestDecide(t *testing.T) {
	withAge := func(p Policy, d time.Duration) Policy { p.MaxAge = d; return p }
	tests := map[string]struct {
		pol     Policy
		members []Member
		want    planOf
	}{
		"empty pool creates up to replicas": {pol: policy(3, 1, 0), want: planOf{Create: 3}},
		"steady pool does nothing":          {pol: policy(3, 1, 0), members: members(3)},
		"scale up within surge":             {pol: policy(5, 1, 0), members: members(2), want: planOf{Create: 3}},
		"rollout surge-first: one new, none drained while all must stay": {
			pol: policy(3, 1, 0), members: members(3, old), want: planOf{Create: 1}},
		"rollout maxUnavailable 1: one new and one drained at once": {
			pol: policy(6, 1, 1), members: members(6, old, leases(1)),
			want: planOf{Create: 1, Drain: []Removal{{Name: "a", Reason: ReasonOutOfDate, Leases: 1}}}},
		"rollout waits for the surge member to be Ready": {
			pol: policy(3, 1, 0), members: append(members(3, old), member("n", notReady)), want: planOf{}},
		"rollout drains once the surge member is Ready": {
			pol: policy(3, 1, 0), members: append(members(3, old), member("n")),
			want: planOf{Drain: []Removal{{Name: "a", Reason: ReasonOutOfDate}}}},
		"draining member still counts toward the total": {
			pol: policy(3, 1, 0), members: append(members(2, old), member("c", old, drainingFor(time.Second), leases(1)), member("n")),
			want: planOf{}},
		"drained member without leases is deleted": {
			pol: policy(3, 1, 0), members: append(members(3), member("d", old, drainingFor(time.Second))),
			want: planOf{Delete: []Deletion{{Name: "d", Why: "drained"}}}},
		"drain timeout deletes a leased member": {
			pol: policy(3, 1, 0), members: append(members(3), member("d", old, drainingFor(6*time.Minute), leases(2))),
			want: planOf{Delete: []Deletion{{Name: "d", Why: "drain timeout"}}}},
		"unknown leases wait for the timeout": {
			pol: policy(3, 1, 0), members: append(members(3), member("d", old, drainingFor(time.Minute), leases(-1))), want: planOf{}},
		"not ready stale member goes at once": {
			pol: policy(3, 1, 0), members: append(members(2), member("x", old, notReady)),
			want: planOf{Create: 1, Delete: []Deletion{{Name: "x", Why: "not ready", Reason: ReasonOutOfDate}}}},
		"deleting members count toward the total": {
			pol: policy(3, 1, 0), members: append(members(3), member("x", deleting)), want: planOf{}},
		"scale down: not Ready, then unleased, then fewest leases, then oldest": {
			pol: policy(2, 1, 0),
			members: []Member{
				member("leased2", leases(2)), member("leased1", leases(1)), member("young", created(time.Minute)),
				member("older", created(2*time.Hour)), member("pending", notReady),
			},
			want: planOf{
				Delete: []Deletion{{Name: "pending", Why: "not ready", Reason: ReasonScaledDown}},
				Drain:  []Removal{{Name: "older", Reason: ReasonScaledDown}, {Name: "young", Reason: ReasonScaledDown}},
			}},
		"scale to zero drains everything": {
			pol: policy(0, 1, 0), members: members(2),
			want: planOf{Drain: []Removal{{Name: "a", Reason: ReasonScaledDown}, {Name: "b", Reason: ReasonScaledDown}}}},
		"maxAge recycles the oldest within the budget": {
			pol: withAge(policy(3, 1, 0), time.Hour), members: append(members(2, created(time.Minute)), member("c", created(2*time.Hour))),
			want: planOf{Create: 1}},
		"maxAge drains once the replacement is Ready": {
			pol: withAge(policy(3, 1, 0), time.Hour), members: append(members(3, created(time.Minute)), member("c", created(2*time.Hour))),
			want: planOf{Drain: []Removal{{Name: "c", Reason: ReasonTooOld}}}},
		"unhealthy past the timeout is replaced": {
			pol: policy(6, 1, 0), members: append(members(5), member("u", unhealthyFor(6*time.Minute))),
			want: planOf{Create: 1, Delete: []Deletion{{Name: "u", Why: "not ready", Reason: ReasonUnhealthy}}}},
		"stuck starting past the timeout is replaced": {
			pol: policy(6, 1, 0), members: append(members(5), member("s", unhealthyFor(6*time.Minute), starting)),
			want: planOf{Create: 1, Delete: []Deletion{{Name: "s", Why: "not ready", Reason: ReasonUnhealthy}}}},
		"starting members of a rollout do not pause remediation": {
			pol:     policy(6, 1, 0),
			members: append(members(3), member("n1", unhealthyFor(time.Second), starting), member("n2", unhealthyFor(time.Second), starting), member("n3", unhealthyFor(time.Second), starting), member("u", unhealthyFor(time.Hour))),
			want:    planOf{Delete: []Deletion{{Name: "u", Why: "not ready", Reason: ReasonUnhealthy}}}},
		"unhealthy within the timeout stays": {
			pol: policy(6, 1, 0), members: append(members(5), member("u", unhealthyFor(time.Minute))), want: planOf{}},
		"too many unhealthy: remediation pauses": {
			pol: policy(6, 1, 0), members: members(6, unhealthyFor(time.Hour)), want: planOf{Paused: true}},
		"exactly maxUnhealthy unhealthy: remediation goes on": {
			pol: policy(6, 1, 0), members: append(members(4), member("u", unhealthyFor(time.Hour)), member("v", unhealthyFor(time.Hour))),
			want: planOf{Create: 1, Delete: []Deletion{
				{Name: "u", Why: "not ready", Reason: ReasonUnhealthy}, {Name: "v", Why: "not ready", Reason: ReasonUnhealthy}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.pol, tc.members, t0)
			got := planOf{Create: p.Create, Drain: p.Drain, Delete: p.Delete, Paused: p.RemediationPaused}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRolloutSimulation runs Decide to completion, members becoming Ready
// one step after creation and leaving one step after deletion, and checks
// the budget at every step.
func TestRolloutSimulation(t *testing.T) {
	for _, tc := range []struct{ replicas, surge, unavailable int }{{6, 1, 1}, {6, 1, 0}, {6, 0, 1}, {3, 2, 0}, {10, 3, 2}} {
		pol := policy(tc.replicas, tc.surge, tc.unavailable)
		ms := members(tc.replicas, old)
		next := 0
		for step := 0; ; step++ {
			if step > 100 {
				t.Fatalf("%+v: no convergence after 100 steps", tc)
			}
			ready, total := 0, len(ms)
			for _, m := range ms {
				if m.Ready {
					ready++
				}
			}
			if ready < tc.replicas-tc.unavailable || total > tc.replicas+tc.surge {
				t.Fatalf("%+v step %d: %d Ready, %d members", tc, step, ready, total)
			}
			p := Decide(pol, ms, t0)
			if p.Complete {
				break
			}
			// Apply: deletions leave next step; drains get no leases so they delete next step.
			var after []Member
			gone := map[string]bool{}
			for _, d := range p.Delete {
				gone[d.Name] = true
			}
			drain := map[string]bool{}
			for _, d := range p.Drain {
				drain[d.Name] = true
			}
			for _, m := range ms {
				switch {
				case m.Deleting || gone[m.Name]:
					if !m.Deleting {
						m.Deleting, m.Ready = true, false
						after = append(after, m)
					}
				case drain[m.Name]:
					m.DrainingSince = t0
					after = append(after, m)
				default:
					if m.Revision == "new" {
						m.Ready = true
					}
					after = append(after, m)
				}
			}
			for range p.Create {
				next++
				after = append(after, Member{Name: string(rune('A' + next)), Revision: "new", Created: t0})
			}
			ms = after
		}
	}
}

func TestResolvePolicyRoundsLikeADeployment(t *testing.T) {
	pct := intstr.FromString
	num := intstr.FromInt32
	tests := map[string]struct {
		replicas                 int
		surge, unavail, unhealth intstr.IntOrString
		want                     [3]int
	}{
		"numbers":                             {replicas: 6, surge: num(1), unavail: num(1), unhealth: num(2), want: [3]int{1, 1, 2}},
		"surge rounds up":                     {replicas: 6, surge: pct("25%"), unavail: num(0), unhealth: pct("40%"), want: [3]int{2, 0, 2}},
		"unavailable rounds down":             {replicas: 6, surge: num(1), unavail: pct("25%"), unhealth: pct("40%"), want: [3]int{1, 1, 2}},
		"both round to zero: one unavailable": {replicas: 3, surge: pct("0%"), unavail: pct("10%"), unhealth: pct("40%"), want: [3]int{0, 1, 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, u, h, err := ResolvePolicy(tc.replicas, &tc.surge, &tc.unavail, &tc.unhealth)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, [3]int{s, u, h}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAgeLimitJittersBelowMaxAge(t *testing.T) {
	seen := map[time.Duration]bool{}
	for _, name := range []string{"eu-abcde", "eu-fghjk", "eu-lmnpq", "eu-rstvw"} {
		l := AgeLimit(name, time.Hour)
		if l > time.Hour || l < 54*time.Minute {
			t.Errorf("AgeLimit(%s) = %v, want within [54m, 1h]", name, l)
		}
		seen[l] = true
	}
	if len(seen) < 2 {
		t.Errorf("four names got one age limit: no jitter")
	}
}
