package operator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanMembership(t *testing.T) {
	pod := func(uid string) replicaPod { return replicaPod{UID: uid, Address: uid + ":7400"} }
	voter := func(id string) member { return member{ID: id, Address: id + ":7400", Voter: true, Applied: -1} }
	follower := func(id string, applied int64) member {
		return member{ID: id, Address: id + ":7400", Applied: applied}
	}
	for _, tc := range []struct {
		name    string
		pods    []replicaPod
		members []member
		applied int64
		want    []memberAction
	}{{
		name:    "all in place: nothing to do",
		pods:    []replicaPod{pod("a"), pod("b"), pod("c")},
		members: []member{voter("a"), voter("b"), voter("c")},
	}, {
		name:    "a new replica joins without a vote",
		pods:    []replicaPod{pod("a"), pod("b")},
		members: []member{voter("a")},
		want:    []memberAction{{Kind: addFollower, ID: "b", Address: "b:7400"}},
	}, {
		name:    "a replica that has not published its address waits",
		pods:    []replicaPod{pod("a"), {UID: "b"}},
		members: []member{voter("a")},
	}, {
		name:    "a follower that caught up gets its vote",
		pods:    []replicaPod{pod("a"), pod("b")},
		members: []member{voter("a"), follower("b", 1000-maxLag)},
		applied: 1000,
		want:    []memberAction{{Kind: addVoter, ID: "b", Address: "b:7400"}},
	}, {
		name:    "a follower behind by more than maxLag waits for its vote",
		pods:    []replicaPod{pod("a"), pod("b")},
		members: []member{voter("a"), follower("b", 1000-maxLag-1)},
		applied: 1000,
	}, {
		name:    "a follower whose progress is unknown waits for its vote",
		pods:    []replicaPod{pod("a"), pod("b")},
		members: []member{voter("a"), follower("b", -1)},
		applied: 10,
	}, {
		name:    "one vote changes per plan",
		pods:    []replicaPod{pod("a"), pod("b"), pod("c")},
		members: []member{voter("a"), follower("b", 10), follower("c", 10)},
		applied: 10,
		want:    []memberAction{{Kind: addVoter, ID: "b", Address: "b:7400"}},
	}, {
		name:    "a voter whose Pod is gone is removed; no vote is given in the same plan",
		pods:    []replicaPod{pod("a"), pod("c")},
		members: []member{voter("a"), follower("c", 10), voter("b")},
		applied: 10,
		want:    []memberAction{{Kind: remove, ID: "b"}},
	}, {
		name:    "a Pod being deleted keeps its vote until it is gone",
		pods:    []replicaPod{pod("a"), {UID: "b", Address: "b:7400", Gone: true}},
		members: []member{voter("a"), voter("b")},
	}, {
		name:    "a Pod being deleted does not join",
		pods:    []replicaPod{pod("a"), {UID: "b", Address: "b:7400", Gone: true}},
		members: []member{voter("a")},
	}, {
		name:    "the leader never removes itself",
		pods:    []replicaPod{pod("b")},
		members: []member{voter("a"), voter("b")},
	}, {
		name:    "a recreated Pod is a new member; its old UID leaves",
		pods:    []replicaPod{pod("a"), pod("b2")},
		members: []member{voter("a"), voter("b")},
		want: []memberAction{
			{Kind: remove, ID: "b"},
			{Kind: addFollower, ID: "b2", Address: "b2:7400"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := planMembership("a", tc.pods, tc.members, tc.applied)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("planMembership (-want +got):\n%s", diff)
			}
		})
	}
}
