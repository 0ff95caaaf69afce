package operator

import (
	"cmp"
	"slices"
)

// Who belongs to the lease store's Raft group, decided from what the API
// server shows (docs/decisions/0382-raft-membership-from-the-api-server.md):
//
//   - a replica is a Pod of the operator that is running, not being
//     deleted, and has published its peer address (PeerAddressAnnotation);
//     its member ID is the Pod's UID;
//   - a new replica joins without a vote and gets one once it has caught up
//     with the log (within maxLag entries of the leader), so that a rolling
//     update never counts a blank replica towards the quorum;
//   - a member leaves when the API server no longer shows its Pod: never on
//     a timeout, since a stopped leader comes back (SIGSTOP, a partition).

// maxLag is how many entries behind the leader a new member may be when it
// gets its vote.
const maxLag = 64

// replicaPod is an operator Pod as membership sees it.
type replicaPod struct {
	UID, Address string
	// Gone: the Pod is being deleted (it keeps its vote until it is gone).
	Gone bool
}

// member is one member of the group as Raft knows it, and how far it has
// followed the log (-1: unknown).
type member struct {
	ID, Address string
	Voter       bool
	Applied     int64
}

type memberAction struct {
	// Kind is addFollower, addVoter or remove.
	Kind        string
	ID, Address string
}

const (
	addFollower = "addFollower"
	addVoter    = "addVoter"
	remove      = "remove"
)

// planMembership is what the leader changes in the group: it adds the
// replicas that are not members, gives a vote to the followers that have
// caught up with leaderApplied, and removes the members whose Pods are
// gone. self is the leader's own ID, which it never removes. At most one
// vote changes per plan, so that the quorum moves one step at a time.
func planMembership(self string, pods []replicaPod, members []member, leaderApplied int64) []memberAction {
	byUID := map[string]replicaPod{}
	for _, p := range pods {
		byUID[p.UID] = p
	}
	known := map[string]bool{}
	var out []memberAction
	votes := 0 // votes this plan changes
	for _, m := range members {
		known[m.ID] = true
		if _, exists := byUID[m.ID]; !exists && m.ID != self {
			out = append(out, memberAction{Kind: remove, ID: m.ID})
			if m.Voter {
				votes++
			}
		}
	}
	for _, m := range members {
		p, exists := byUID[m.ID]
		if exists && votes == 0 && !m.Voter && !p.Gone && m.Applied >= 0 && leaderApplied-m.Applied <= maxLag {
			out = append(out, memberAction{Kind: addVoter, ID: m.ID, Address: p.Address})
			votes++
		}
	}
	for _, p := range pods {
		if !known[p.UID] && !p.Gone && p.Address != "" {
			out = append(out, memberAction{Kind: addFollower, ID: p.UID, Address: p.Address})
		}
	}
	slices.SortStableFunc(out, func(a, b memberAction) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
