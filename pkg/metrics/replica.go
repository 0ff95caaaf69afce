package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// replicaMetrics are the lease store's replication (pkg/lease/replica.Metrics).
type replicaMetrics struct {
	leader        prometheus.Gauge
	leaderChanges prometheus.Counter
	commit        prometheus.Histogram
	applied       prometheus.Gauge
	committed     prometheus.Gauge
	members       *prometheus.GaugeVec
	unreadable    prometheus.Gauge
}

func newReplicaMetrics() replicaMetrics {
	r := replicaMetrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "lease_store_raft_leader",
			Help: "1 while this replica leads the lease store's Raft group (--lease-replication=raft) and decides, else 0.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "lease_store_raft_leader_changes_total",
			Help: "Changes of the lease store's Raft leader this replica saw.",
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "lease_store_raft_commit_seconds",
			Help:    "Time from a decision of the leader's lease store to its log entry committed and applied: what a grant waits before it is answered.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "lease_store_raft_applied_index",
			Help: "The last log entry this replica's committed store applied.",
		}),
		committed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "lease_store_raft_commit_index",
			Help: "The last log entry this replica knows committed; minus lease_store_raft_applied_index, how far it lags.",
		}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "lease_store_raft_members",
			Help: "Members of the lease store's Raft group as this replica knows them, by suffrage: voter, or follower (a new replica catching up).",
		}, []string{"suffrage"}),
	}
	r.unreadable = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "lease_store_raft_unreadable",
		Help: "1 while this replica cannot read the lease store's log (an entry or snapshot of a newer release, after a rollback): it applies nothing more, is not ready and does not lead.",
	})
	r.members.WithLabelValues("voter")
	r.members.WithLabelValues("follower")
	return r
}

func (r replicaMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.leader, r.leaderChanges, r.commit, r.applied, r.committed, r.members, r.unreadable}
}

// SetRaftLeader records whether this replica leads the store's Raft group.
func (m *Metrics) SetRaftLeader(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	m.replica.leader.Set(v)
}

// ObserveRaftLeaderChange counts a change of the Raft leader.
func (m *Metrics) ObserveRaftLeaderChange() { m.replica.leaderChanges.Inc() }

// ObserveRaftCommit records how long a decision waited for its commit.
func (m *Metrics) ObserveRaftCommit(d time.Duration) { m.replica.commit.Observe(d.Seconds()) }

// SetRaftProgress records how far this replica applied and knows committed.
func (m *Metrics) SetRaftProgress(applied, committed uint64) {
	m.replica.applied.Set(float64(applied))
	m.replica.committed.Set(float64(committed))
}

// SetRaftMembers records the group's members by suffrage.
func (m *Metrics) SetRaftMembers(voters, followers int) {
	m.replica.members.WithLabelValues("voter").Set(float64(voters))
	m.replica.members.WithLabelValues("follower").Set(float64(followers))
}

// SetRaftUnreadable records whether this replica stopped applying the log
// because it cannot read it.
func (m *Metrics) SetRaftUnreadable(stopped bool) {
	v := 0.0
	if stopped {
		v = 1
	}
	m.replica.unreadable.Set(v)
}
