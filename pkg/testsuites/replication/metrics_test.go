package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// raftView is what one replica's /metrics says of the lease store's Raft
// group: the gauges the alerts and the fleet dashboard are built on
// (artifacts/alerts, docs/operations.md).
type raftView struct {
	leader, changes, commits   float64
	applied, committed         float64
	voters, followers          float64
	leaderFound, changesFound  bool
	appliedFound, commitsFound bool
}

func scrapeRaft(ctx context.Context, r *replicaProc) (raftView, error) {
	s, err := r.proc.Scrape(ctx)
	if err != nil {
		return raftView{}, err
	}
	var v raftView
	v.leader, v.leaderFound = s.Value("proxy_operator_lease_store_raft_leader", nil)
	v.changes, v.changesFound = s.Value("proxy_operator_lease_store_raft_leader_changes_total", nil)
	v.commits, v.commitsFound = s.Value("proxy_operator_lease_store_raft_commit_seconds", nil)
	v.applied, v.appliedFound = s.Value("proxy_operator_lease_store_raft_applied_index", nil)
	v.committed, _ = s.Value("proxy_operator_lease_store_raft_commit_index", nil)
	v.voters, _ = s.Value("proxy_operator_lease_store_raft_members", map[string]string{"suffrage": "voter"})
	v.followers, _ = s.Value("proxy_operator_lease_store_raft_members", map[string]string{"suffrage": "follower"})
	return v, nil
}

// groupView checks what the alerts assume of the running replicas'
// metrics: exactly one leads (ProxyOperatorLeaseStoreLeaderCount sums the
// gauge), each counts every member a voter and none catching up
// (ProxyOperatorLeaseStoreVotersLow), each has applied what it knows
// committed and at least minApplied (ProxyOperatorLeaseStoreReplicaLagging,
// ...Stalled), and each saw at least minChanges changes of leader.
func groupView(ctx context.Context, g *group, minApplied, minChanges float64) (map[string]raftView, *replicaProc, error) {
	views := map[string]raftView{}
	var leader *replicaProc
	for _, r := range g.replicas {
		if !r.proc.Running() {
			continue
		}
		v, err := scrapeRaft(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case !v.leaderFound || !v.changesFound || !v.appliedFound || !v.commitsFound:
			return nil, nil, fmt.Errorf("%s exports no raft metrics: %+v", r.name, v)
		case v.voters != float64(len(g.replicas)) || v.followers != 0:
			return nil, nil, fmt.Errorf("%s counts %v voters and %v followers, want %d and 0", r.name, v.voters, v.followers, len(g.replicas))
		case v.applied != v.committed || v.applied < minApplied:
			return nil, nil, fmt.Errorf("%s applied %v of %v committed, want all and at least %v", r.name, v.applied, v.committed, minApplied)
		case v.changes < minChanges:
			return nil, nil, fmt.Errorf("%s saw %v changes of leader, want at least %v", r.name, v.changes, minChanges)
		}
		if v.leader == 1 {
			if leader != nil {
				return nil, nil, fmt.Errorf("%s and %s both say they lead", leader.name, r.name)
			}
			leader = r
		}
		views[r.name] = v
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("no replica says it leads")
	}
	return views, leader, nil
}

// TestReplicaMetricsFollowTheGroup (issue 62): the replication's metrics
// on three real replicas, the ground of the alerts and the dashboard.
// Formed, every replica counts three voters, exactly one says it leads, and
// each has applied all it knows committed. A grant taken through a
// follower is observed in the leader's commit latency and applied on every
// replica. The leader killed (SIGKILL): the others count another change of
// leader, one of them leads, and both have applied past the grant.
func TestReplicaMetricsFollowTheGroup(t *testing.T) {
	g := newGroup(t, 3)
	g.voters(startTimeout)
	var views map[string]raftView
	var leader *replicaProc
	eventually.Check(t, startTimeout, pollInterval, "the group formed in every replica's metrics", func(ctx context.Context) error {
		var err error
		views, leader, err = groupView(ctx, g, 1, 1)
		return err
	})

	g.fleet(1)
	var follower *replicaProc
	for _, r := range g.replicas {
		if r != leader {
			follower = r
			break
		}
	}
	before, err := scrapeRaft(t.Context(), leader)
	if err != nil {
		t.Fatal(err)
	}
	l, err := follower.api.Acquire(t.Context(), client.AcquireRequest{Holder: "metrics", Namespace: g.ns})
	if err != nil {
		t.Fatalf("acquire through the follower %s: %v", follower.name, err)
	}
	after, err := scrapeRaft(t.Context(), leader)
	if err != nil {
		t.Fatal(err)
	}
	// The answer goes out only after its effects are committed: the
	// commit is observed by the time the grant is answered.
	if after.commits <= before.commits {
		t.Errorf("the leader's lease_store_raft_commit_seconds counted %v decisions before the grant and %v after; want more", before.commits, after.commits)
	}
	granted := after.committed
	eventually.Check(t, startTimeout, pollInterval, "the grant applied on every replica", func(ctx context.Context) error {
		_, _, err := groupView(ctx, g, granted, 1)
		return err
	})
	if err := follower.api.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}

	changes := map[string]float64{}
	for name, v := range views {
		changes[name] = v.changes
	}
	leader.proc.Kill()
	eventually.Check(t, startTimeout, pollInterval, "another replica leads in the survivors' metrics", func(ctx context.Context) error {
		now, next, err := groupView(ctx, g, granted, 1)
		if err != nil {
			return err
		}
		if next == leader {
			return fmt.Errorf("the killed %s still leads", leader.name)
		}
		for name, v := range now {
			if v.changes <= changes[name] {
				return fmt.Errorf("%s counts %v changes of leader, as before the kill", name, v.changes)
			}
		}
		return nil
	})
}
