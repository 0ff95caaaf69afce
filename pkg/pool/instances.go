package pool

import (
	"cmp"
	"slices"
)

// A pool with spec.membersPerInstance keeps shared instances, and makes
// every member a session on one of them
// (docs/decisions/0354-pool-members-are-sessions-on-ranged-instances.md).
// PlanInstances decides how many instances there are, which one each new
// member goes on, and which instances go; sync acts on it.

// Instance is what the instance plan needs of one shared instance.
type Instance struct {
	Name     string
	Revision string
	// Serving: phase Ready with exit ranges, so sessions can be put on it.
	Serving bool
	// Deleting: being deleted (or asked to be).
	Deleting bool
	// Active members are sessions on it that are neither draining nor
	// being deleted: they count against membersPerInstance.
	Active int
	// Users are all members on it, leaving ones included: an instance is
	// deleted only when none is left, so that no live lease loses its exit.
	Users int
}

// InstancePlan is what PlanInstances decided.
type InstancePlan struct {
	// Create is how many instances to add, of the current revision.
	Create int
	// Delete are instances no member uses that the pool no longer needs.
	Delete []string
	// Place is, for each member to create, the instance it goes on; shorter
	// than asked when the serving instances are full (the rest wait for
	// an instance to serve, or a leaving member to go).
	Place []string
}

// PlanInstances plans the instances of a pool of replicas members with
// perInstance members each (perInstance > 0), given the instances that
// exist and newMembers members about to be created. It wants
// ceil(replicas/perInstance) instances of the current revision; a new
// member goes on the serving instance of that revision with the fewest
// active members (beyond the bound only as a surge, once every wanted
// instance serves); an instance no member uses goes when it is of an
// older revision or beyond the count wanted.
func PlanInstances(instances []Instance, replicas, perInstance, newMembers int, revision string) InstancePlan {
	want := (replicas + perInstance - 1) / perInstance
	var current []Instance
	var plan InstancePlan
	for _, in := range instances {
		switch {
		case in.Deleting:
		case in.Revision != revision:
			if in.Users == 0 {
				plan.Delete = append(plan.Delete, in.Name)
			}
		default:
			current = append(current, in)
		}
	}
	// Surplus current instances go, unused ones only: those not serving
	// first (they never came up), then the emptiest by name.
	slices.SortFunc(current, func(a, b Instance) int {
		if a.Serving != b.Serving {
			if a.Serving {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	surplus := len(current) - want
	var kept []Instance
	for _, in := range current {
		if surplus > 0 && in.Users == 0 {
			plan.Delete = append(plan.Delete, in.Name)
			surplus--
			continue
		}
		kept = append(kept, in)
	}
	plan.Create = max(0, want-len(kept))
	// Every instance wanted serves: a member beyond the bound is a surge
	// (a replacement made before the member it replaces goes), which the
	// instances take rather than wait for the drain; a session costs
	// nothing. While an instance is still coming, members wait for it.
	overflow := plan.Create == 0 && !slices.ContainsFunc(kept, func(in Instance) bool { return !in.Serving })
	plan.Place = place(kept, perInstance, newMembers, overflow)
	slices.Sort(plan.Delete)
	return plan
}

// place puts n members, one at a time, on the serving instance with the
// fewest active members (ties: by name), beyond perInstance only when
// overflow allows it.
func place(instances []Instance, perInstance, n int, overflow bool) []string {
	var serving []Instance
	for _, in := range instances {
		if in.Serving {
			serving = append(serving, in)
		}
	}
	var out []string
	for range n {
		best := -1
		for i, in := range serving {
			if in.Active >= perInstance && !overflow {
				continue
			}
			if best < 0 || in.Active < serving[best].Active || (in.Active == serving[best].Active && in.Name < serving[best].Name) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		serving[best].Active++
		out = append(out, serving[best].Name)
	}
	return out
}
