package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func bannedBy(n int) memberOption { return func(m *Member) { m.BannedDomains = n } }
func served(n int64) memberOption { return func(m *Member) { m.Served = n } }

func TestRecycleReason(t *testing.T) {
	both := RecyclePolicy{MaxBannedDomains: 3, Window: time.Hour, MaxLeases: 100}
	tests := map[string]struct {
		pol    RecyclePolicy
		member Member
		want   Reason
	}{
		"off: nothing recycles":             {pol: RecyclePolicy{}, member: member("a", bannedBy(50), served(1e6))},
		"below both limits":                 {pol: both, member: member("a", bannedBy(2), served(99))},
		"banned by maxBannedDomains":        {pol: both, member: member("a", bannedBy(3)), want: ReasonBurned},
		"banned by more than the limit":     {pol: both, member: member("a", bannedBy(7)), want: ReasonBurned},
		"served maxLeases":                  {pol: both, member: member("a", served(100)), want: ReasonUsedUp},
		"burned beats used up":              {pol: both, member: member("a", bannedBy(3), served(100)), want: ReasonBurned},
		"only maxLeases set ignores bans":   {pol: RecyclePolicy{MaxLeases: 5}, member: member("a", bannedBy(90), served(4))},
		"only maxBannedDomains ignores use": {pol: RecyclePolicy{MaxBannedDomains: 1, Window: time.Minute}, member: member("a", served(1e9))},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RecycleReason(tc.pol, tc.member); got != tc.want {
				t.Errorf("RecycleReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDecideRecycles: burned and used-up members are stale like any other,
// within the same budget, and their removals carry the evidence.
func TestDecideRecycles(t *testing.T) {
	withRecycle := func(p Policy) Policy {
		p.Recycle = RecyclePolicy{MaxBannedDomains: 3, Window: 10 * time.Minute, MaxLeases: 50}
		return p
	}
	burnedEvidence := "burned: 3 distinct domains banned it within 10m0s (maxBannedDomains 3)"
	tests := map[string]struct {
		pol     Policy
		members []Member
		want    planOf
	}{
		"burned member: a successor first, nothing drained while all must stay": {
			pol: withRecycle(policy(3, 1, 0)), members: append(members(2), member("x", bannedBy(3))),
			want: planOf{Create: 1}},
		"burned member drains once its successor is Ready": {
			pol: withRecycle(policy(3, 1, 0)), members: append(members(3), member("x", bannedBy(3), leases(1))),
			want: planOf{Drain: []Removal{{Name: "x", Reason: ReasonBurned, Leases: 1, Evidence: burnedEvidence}}}},
		"maxUnavailable 1: burned drains beside its successor's creation": {
			pol: withRecycle(policy(3, 1, 1)), members: append(members(2), member("x", bannedBy(4))),
			want: planOf{Create: 1, Drain: []Removal{{Name: "x", Reason: ReasonBurned,
				Evidence: "burned: 4 distinct domains banned it within 10m0s (maxBannedDomains 3)"}}}},
		"used up member drains with its count": {
			pol: withRecycle(policy(2, 1, 1)), members: append(members(1), member("u", served(50))),
			want: planOf{Create: 1, Drain: []Removal{{Name: "u", Reason: ReasonUsedUp, Evidence: "used up: served 50 leases (maxLeases 50)"}}}},
		"not Ready burned member goes at once": {
			pol: withRecycle(policy(3, 1, 0)), members: append(members(2), member("x", bannedBy(3), notReady)),
			want: planOf{Create: 1, Delete: []Deletion{{Name: "x", Why: "not ready", Reason: ReasonBurned, Evidence: burnedEvidence}}}},
		"two burned, maxUnavailable 1: one at a time": {
			pol: withRecycle(policy(3, 1, 1)), members: append(members(1), member("x", bannedBy(3), created(2*time.Hour)), member("y", bannedBy(3))),
			want: planOf{Create: 1, Drain: []Removal{{Name: "x", Reason: ReasonBurned, Evidence: burnedEvidence}}}},
		"out of date wins over burned": {
			pol: withRecycle(policy(3, 1, 0)), members: append(members(3), member("x", old, bannedBy(3))),
			want: planOf{Drain: []Removal{{Name: "x", Reason: ReasonOutOfDate}}}},
		"draining burned member is not chosen twice": {
			pol: withRecycle(policy(3, 1, 0)), members: append(members(3), member("x", bannedBy(3), drainingFor(time.Second), leases(1))),
			want: planOf{}},
		"without spec.recycle a full pool stays": {
			pol: policy(3, 1, 0), members: append(members(2), member("x", bannedBy(3), served(1000))), want: planOf{}},
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

func TestRecyclePolicyOf(t *testing.T) {
	tests := map[string]struct {
		spec    *crawlv1alpha1.PoolRecycle
		want    RecyclePolicy
		wantErr string
	}{
		"unset":                {},
		"bans, default window": {spec: &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](3)}, want: RecyclePolicy{MaxBannedDomains: 3, Window: time.Hour}},
		"both": {spec: &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](2), Window: &metav1.Duration{Duration: time.Minute}, MaxLeases: ptr.To[int64](9)},
			want: RecyclePolicy{MaxBannedDomains: 2, Window: time.Minute, MaxLeases: 9}},
		"neither limit":      {spec: &crawlv1alpha1.PoolRecycle{}, wantErr: "spec.recycle: set maxBannedDomains or maxLeases"},
		"maxBannedDomains 0": {spec: &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](0)}, wantErr: "spec.recycle.maxBannedDomains: 0 is outside 1..100"},
		"maxLeases negative": {spec: &crawlv1alpha1.PoolRecycle{MaxLeases: ptr.To[int64](-1)}, wantErr: "spec.recycle.maxLeases: -1 is below 1"},
		"window below 1s":    {spec: &crawlv1alpha1.PoolRecycle{MaxLeases: ptr.To[int64](1), Window: &metav1.Duration{Duration: time.Millisecond}}, wantErr: "spec.recycle.window: 1ms is outside 1s..168h"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := recyclePolicyOf(tc.spec)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff([]any{tc.want, tc.wantErr}, []any{got, gotErr}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecycleCountsSurviveALostWrite: a recycle counted before a status
// write that loses a conflict is still added to the next write, once.
func TestRecycleCountsSurviveALostWrite(t *testing.T) {
	pol := RecyclePolicy{MaxBannedDomains: 3, Window: time.Hour}
	pool := func(burned int64) *crawlv1alpha1.ProxyPool {
		p := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "eu"}}
		p.Status.Recycled.Burned = burned
		return p
	}
	key := cache.NewObjectName("ns", "eu")
	r := newRecycleState(nil, 0)
	stage := func(cached *crawlv1alpha1.ProxyPool) *crawlv1alpha1.ProxyPool {
		p := cached.DeepCopy()
		r.stageStatus(p, cached, pol, Plan{}, nil)
		return p
	}
	var got []int64
	r.count(key, ReasonBurned)
	got = append(got, stage(pool(4)).Status.Recycled.Burned) // the write conflicts: nothing stored
	r.count(key, ReasonBurned)
	next := stage(pool(4))
	got = append(got, next.Status.Recycled.Burned)
	r.written(key, next.Status.Recycled, pool(4).Status.Recycled) // stored
	got = append(got, stage(pool(6)).Status.Recycled.Burned)
	r.written(key, pool(6).Status.Recycled, pool(6).Status.Recycled) // a write that staged nothing
	r.count(key, ReasonUsedUp)
	r.written(key, pool(6).Status.Recycled, pool(6).Status.Recycled) // the template-error path: nothing staged
	got = append(got, stage(pool(6)).Status.Recycled.UsedUp)
	if diff := cmp.Diff([]int64{5, 6, 6, 1}, got); diff != "" {
		t.Errorf("staged counts (-want +got):\n%s", diff)
	}
}
