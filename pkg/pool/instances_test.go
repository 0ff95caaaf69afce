package pool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPlanInstances(t *testing.T) {
	const rev = "r2"
	serving := func(name string, active, users int) Instance {
		return Instance{Name: name, Revision: rev, Serving: true, Active: active, Users: users}
	}
	tests := map[string]struct {
		instances  []Instance
		replicas   int
		per        int
		newMembers int
		want       InstancePlan
	}{
		"empty pool of 64 on 64 per instance: one instance, members wait for it": {
			replicas: 64, per: 64, newMembers: 64,
			want: InstancePlan{Create: 1},
		},
		"one serving instance takes all 64": {
			instances: []Instance{serving("i1", 0, 0)}, replicas: 64, per: 64, newMembers: 64,
			want: InstancePlan{Place: repeat("i1", 64)},
		},
		"the bound: 10 members, 4 per instance, 3 instances": {
			replicas: 10, per: 4,
			want: InstancePlan{Create: 3},
		},
		"fewest members first, ties by name": {
			instances: []Instance{serving("i1", 3, 3), serving("i2", 1, 1), serving("i3", 1, 2)}, replicas: 12, per: 4, newMembers: 4,
			want: InstancePlan{Place: []string{"i2", "i3", "i2", "i3"}},
		},
		"a surge beyond the bound goes on the fewest once every wanted instance serves": {
			instances: []Instance{serving("i1", 4, 4), serving("i2", 3, 3)}, replicas: 8, per: 4, newMembers: 3,
			want: InstancePlan{Place: []string{"i2", "i1", "i2"}},
		},
		"a replacement made before the banned member drains (surge) goes on the full instance": {
			instances: []Instance{serving("i1", 64, 64)}, replicas: 64, per: 64, newMembers: 1,
			want: InstancePlan{Place: []string{"i1"}},
		},
		"scaling up: full instances take no more while the new one comes": {
			instances: []Instance{serving("i1", 4, 4), serving("i2", 3, 3)}, replicas: 12, per: 4, newMembers: 5,
			want: InstancePlan{Create: 1, Place: []string{"i2"}},
		},
		"scaling up: an instance not serving yet holds the rest back": {
			instances: []Instance{serving("i1", 4, 4), {Name: "i2", Revision: rev}}, replicas: 8, per: 4, newMembers: 4,
			want: InstancePlan{},
		},
		"a recycled member's replacement: the leaving one does not count against the bound": {
			instances: []Instance{serving("i1", 63, 64)}, replicas: 64, per: 64, newMembers: 1,
			want: InstancePlan{Place: []string{"i1"}},
		},
		"an instance not serving yet takes no member": {
			instances: []Instance{{Name: "i1", Revision: rev}}, replicas: 2, per: 2, newMembers: 2,
			want: InstancePlan{},
		},
		"scaled down: the unused surplus instance goes, the used one stays": {
			instances: []Instance{serving("i1", 4, 4), serving("i2", 0, 0), serving("i3", 0, 1)}, replicas: 4, per: 4,
			want: InstancePlan{Delete: []string{"i2"}},
		},
		"scaled down: an instance that never served goes before a serving one": {
			instances: []Instance{serving("i1", 0, 0), {Name: "i2", Revision: rev}}, replicas: 1, per: 4,
			want: InstancePlan{Delete: []string{"i2"}},
		},
		"scaled to zero: every unused instance goes": {
			instances: []Instance{serving("i1", 0, 0), serving("i2", 0, 0)}, replicas: 0, per: 4,
			want: InstancePlan{Delete: []string{"i1", "i2"}},
		},
		"rollout: old instance drains, kept while members use it; a new one is added": {
			instances: []Instance{{Name: "old", Revision: "r1", Serving: true, Active: 0, Users: 3}}, replicas: 3, per: 4, newMembers: 1,
			want: InstancePlan{Create: 1},
		},
		"rollout done: the old instance without members goes": {
			instances: []Instance{{Name: "old", Revision: "r1", Serving: true}, serving("new", 3, 3)}, replicas: 3, per: 4,
			want: InstancePlan{Delete: []string{"old"}},
		},
		"an instance being deleted is neither counted nor deleted again": {
			instances: []Instance{{Name: "i1", Revision: rev, Deleting: true}}, replicas: 1, per: 1,
			want: InstancePlan{Create: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := PlanInstances(tc.instances, tc.replicas, tc.per, tc.newMembers, rev)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("PlanInstances (-want +got):\n%s", diff)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
