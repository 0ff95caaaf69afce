package pool

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func exitIP(ip string) memberOption { return func(m *Member) { m.ExitIP = ip } }

// TestDecideRerollsDuplicateExitIPs: of two members that leave from one
// exit IP the younger is replaced, within the same budget as any stale
// member; members without a measured exit IP are never duplicates.
func TestDecideRerollsDuplicateExitIPs(t *testing.T) {
	evidence := "exit IP 127.0.9.1 is an older member's too"
	tests := map[string]struct {
		pol     Policy
		members []Member
		want    planOf
	}{
		"distinct exit IPs: nothing to do": {
			pol:     policy(3, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1")), member("b", exitIP("127.0.9.2")), member("c", exitIP("127.0.9.3"))},
		},
		"unmeasured members are not duplicates": {
			pol:     policy(3, 1, 0),
			members: members(3),
		},
		"the younger of two drains once a successor is Ready": {
			pol: policy(3, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), created(2*time.Hour)), member("b", exitIP("127.0.9.1"), leases(1)),
				member("c", exitIP("127.0.9.3")), member("d", exitIP("127.0.9.4"))},
			want: planOf{Drain: []Removal{{Name: "b", Reason: ReasonDuplicateExitIP, Leases: 1, Evidence: evidence}}},
		},
		"a full pool makes the successor first": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), created(2*time.Hour)), member("b", exitIP("127.0.9.1"))},
			want:    planOf{Create: 1},
		},
		"same age: the later name goes": {
			pol:     policy(2, 1, 1),
			members: []Member{member("y", exitIP("127.0.9.1")), member("x", exitIP("127.0.9.1"))},
			want:    planOf{Create: 1, Drain: []Removal{{Name: "y", Reason: ReasonDuplicateExitIP, Evidence: evidence}}},
		},
		"a draining member's IP is free for the others": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), drainingFor(time.Second), leases(1)), member("b", exitIP("127.0.9.1")), member("c", exitIP("127.0.9.2"))},
		},
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

func TestExitAddresses(t *testing.T) {
	tests := map[string]struct {
		ranges []string
		want   uint64
	}{
		"none":                           {want: 0},
		"one IPv4 address":               {ranges: []string{"203.0.113.7"}, want: 1},
		"a /32 and a /31":                {ranges: []string{"203.0.113.7/32", "203.0.113.8/31"}, want: 3},
		"a /30: network and broadcast":   {ranges: []string{"198.18.5.0/30"}, want: 2},
		"a /29":                          {ranges: []string{"198.18.5.0/29"}, want: 6},
		"an IPv6 /126: the first":        {ranges: []string{"fd00::/126"}, want: 3},
		"the larger family counts":       {ranges: []string{"198.18.5.0/29", "fd00::/126"}, want: 6},
		"a /64: more than any pool":      {ranges: []string{"fd00:5e55:1::/64"}, want: math.MaxUint64},
		"saturates":                      {ranges: []string{"fd00:1::/64", "fd00:2::/48"}, want: math.MaxUint64},
		"what does not parse is ignored": {ranges: []string{"nonsense", "198.18.5.0/30"}, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ExitAddresses(tc.ranges); got != tc.want {
				t.Errorf("ExitAddresses(%v) = %d, want %d", tc.ranges, got, tc.want)
			}
		})
	}
}

func TestRangeShortages(t *testing.T) {
	instances := []Instance{
		{Name: "i-small", Serving: true, Active: 4}, {Name: "i-wide", Serving: true, Active: 200},
		{Name: "shared-1", Serving: true, Active: 2}, {Name: "shared-2", Serving: true, Active: 2},
		{Name: "i-gone", Deleting: true, Active: 9}, {Name: "i-unranged", Active: 9},
	}
	ranges := map[string][]string{
		"i-small": {"198.18.5.0/30"}, "i-wide": {"fd00:5e55:1::/64"},
		"shared-1": {"198.18.6.0/29"}, "shared-2": {"198.18.6.0/29"}, "i-gone": {"198.18.7.0/30"},
	}
	want := []RangeShortage{{Instances: []string{"i-small"}, Ranges: []string{"198.18.5.0/30"}, Addresses: 2, Members: 4}}
	if diff := cmp.Diff(want, rangeShortages(instances, ranges)); diff != "" {
		t.Errorf("shortages (-want +got):\n%s", diff)
	}
	instances[3].Active = 5 // 7 members on one shared /29 of 6 addresses
	want = append(want, RangeShortage{Instances: []string{"shared-1", "shared-2"}, Ranges: []string{"198.18.6.0/29"}, Addresses: 6, Members: 7})
	if diff := cmp.Diff(want, rangeShortages(instances, ranges)); diff != "" {
		t.Errorf("with a shared range (-want +got):\n%s", diff)
	}
}

func TestDecideDuplicates(t *testing.T) {
	short := []RangeShortage{{Instances: []string{"p-iabcde"}, Ranges: []string{"198.18.5.0/30"}, Addresses: 2, Members: 4}}
	ago := func(ds ...time.Duration) []time.Time {
		var out []time.Time
		for _, d := range ds {
			out = append(out, t0.Add(-d))
		}
		return out
	}
	tests := map[string]struct {
		duplicates int
		shortages  []RangeShortage
		rerolls    []time.Time
		want       DuplicateVerdict
	}{
		"none": {want: DuplicateVerdict{Status: metav1.ConditionTrue, Reason: ReasonDistinct, Message: "every member measured leaves from an exit IP of its own"}},
		"the first re-roll: at once": {duplicates: 1, want: DuplicateVerdict{Reroll: true, Status: metav1.ConditionFalse, Reason: ReasonRerolling,
			Message: "1 member(s) leave from an older member's exit IP; re-rolling (0 of 8 re-rolls within 1h0m0s done)"}},
		"a range too small: never, and its size said": {duplicates: 2, shortages: short, rerolls: ago(time.Hour * 2),
			want: DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRangeTooSmall, Message: "2 member(s) leave from an older member's exit IP; " +
				"not re-rolled: 4 members on p-iabcde (198.18.5.0/30: 2 exit addresses), so they cannot all differ. Give the instances larger exit ranges or lower spec.membersPerInstance"}},
		"backing off after the third": {duplicates: 1, rerolls: ago(3*time.Minute, time.Minute, 90*time.Second),
			want: DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRerollBackoff, RecheckAfter: time.Minute,
				Message: "1 member(s) leave from an older member's exit IP; 3 of 8 re-rolls within 1h0m0s done, the next not before 2026-12-01T12:01:00Z"}},
		"the back-off passed": {duplicates: 1, rerolls: ago(3*time.Minute, 2*time.Minute, 150*time.Second),
			want: DuplicateVerdict{Reroll: true, Status: metav1.ConditionFalse, Reason: ReasonRerolling,
				Message: "1 member(s) leave from an older member's exit IP; re-rolling (3 of 8 re-rolls within 1h0m0s done)"}},
		"the back-off is capped": {duplicates: 1, rerolls: ago(50*time.Minute, 45*time.Minute, 40*time.Minute, 35*time.Minute, 30*time.Minute, 25*time.Minute, 10*time.Minute),
			want: DuplicateVerdict{Reroll: true, Status: metav1.ConditionFalse, Reason: ReasonRerolling,
				Message: "1 member(s) leave from an older member's exit IP; re-rolling (7 of 8 re-rolls within 1h0m0s done)"}},
		"the bound: stop until the window frees one": {duplicates: 1,
			rerolls: ago(2*time.Hour, 55*time.Minute, 50*time.Minute, 45*time.Minute, 40*time.Minute, 30*time.Minute, 20*time.Minute, 10*time.Minute, 5*time.Minute),
			want: DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRerollsExhausted, RecheckAfter: 5 * time.Minute,
				Message: "1 member(s) leave from an older member's exit IP after 8 re-rolls within 1h0m0s; not re-rolled again before 2026-12-01T12:05:00Z: " +
					"the exit ranges have too few addresses for these members to differ by chance"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, DecideDuplicates(tc.duplicates, tc.shortages, tc.rerolls, t0)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDuplicateRerollsAreBounded plays 200 rounds of 10 s of a pool whose
// members draw their exit IP at random from a range: each round decides,
// then the drained members go and the created ones come up Ready with an
// address of their own draw. On a range with fewer addresses than members
// nothing is re-rolled and the verdict names the range; on a range barely
// larger, re-rolls stay within the window's bound.
func TestDuplicateRerollsAreBounded(t *testing.T) {
	tests := map[string]struct {
		replicas    int
		rangeCIDR   string
		wantReason  string
		maxRerolled int
	}{
		"4 members, 2 addresses": {replicas: 4, rangeCIDR: "198.18.5.0/30", wantReason: ReasonRangeTooSmall, maxRerolled: 0},
		"5 members, 6 addresses": {replicas: 5, rangeCIDR: "198.18.5.0/29", maxRerolled: MaxDuplicateRerolls},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			addresses := int(ExitAddresses([]string{tc.rangeCIDR}))
			draw := func() string { return fmt.Sprintf("198.18.5.%d", 1+rng.IntN(addresses)) }
			var ms []Member
			for i := range tc.replicas {
				ms = append(ms, member(fmt.Sprintf("m%03d", i), exitIP(draw()), created(time.Duration(i)*time.Second)))
			}
			var rs rerollState
			key := cache.NewObjectName("ns", "p")
			pol := policy(tc.replicas, 1, 1)
			rerolled, next := 0, len(ms)
			var v DuplicateVerdict
			for round := range 200 {
				now := t0.Add(time.Duration(round) * 10 * time.Second)
				instances := []Instance{{Name: "p-i0", Serving: true, Active: len(ms)}}
				v = DecideDuplicates(len(duplicateExitIPs(ms)), rangeShortages(instances, map[string][]string{"p-i0": {tc.rangeCIDR}}), rs.recent(key, now), now)
				pol.KeepDuplicates = !v.Reroll
				plan := Decide(pol, ms, now)
				rs.record(key, plan, now)
				for _, d := range plan.Drain {
					if d.Reason == ReasonDuplicateExitIP {
						rerolled++
					}
					ms = slices.DeleteFunc(ms, func(m Member) bool { return m.Name == d.Name })
				}
				for _, d := range plan.Delete {
					ms = slices.DeleteFunc(ms, func(m Member) bool { return m.Name == d.Name })
				}
				for range plan.Create {
					ms = append(ms, Member{Name: fmt.Sprintf("m%03d", next), Revision: "new", Created: now, Ready: true, ExitIP: draw()})
					next++
				}
			}
			t.Logf("%d re-rolls in 200 rounds; last verdict %s: %s", rerolled, v.Reason, v.Message)
			if rerolled > tc.maxRerolled {
				t.Errorf("%d re-rolls in 200 rounds (33 minutes), want at most %d", rerolled, tc.maxRerolled)
			}
			if tc.wantReason != "" && (v.Reason != tc.wantReason || !strings.Contains(v.Message, fmt.Sprintf("%d exit addresses", addresses))) {
				t.Errorf("verdict %s %q, want %s naming %d exit addresses", v.Reason, v.Message, tc.wantReason, addresses)
			}
		})
	}
}
