package replication_test

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/replica"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/leasemodel"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// The fault kit: what the history tests do to a replica, each as a
// container and a network would see it, and each followed by the group's
// recovery (a replica that exited restarts, with its Raft directory, as
// its container would).

type faultKind string

const (
	// sigkill: the process dies at once and restarts with its Raft log.
	sigkill faultKind = "SIGKILL"
	// sigterm: a planned stop; a leader hands Raft's lead to a peer first.
	sigterm faultKind = "SIGTERM"
	// sigstop: the process is paused (SIGSTOP) and resumed (SIGCONT), as a
	// long GC pause or a frozen VM; a leader that lost the lead meanwhile
	// exits and restarts.
	sigstop faultKind = "SIGSTOP"
	// cut: the replica's peer address is filtered from its peers both
	// ways, then healed; its lease API stays reachable.
	cut faultKind = "partition"
)

// fault is one fault as it happened, in the recorder's time.
type fault struct {
	kind    faultKind
	replica int
	leader  bool
	// at is when it struck; healed when a pause or a partition ended.
	at, healed time.Duration
}

func (f fault) String() string {
	who := fmt.Sprintf("replica-%d", f.replica)
	if f.leader {
		who += " (leader)"
	}
	return fmt.Sprintf("%s of %s at %v", f.kind, who, f.at.Round(time.Millisecond))
}

// faults strikes replicas and keeps what it did.
type faults struct {
	g    *group
	rec  *recorder
	cuts map[int]*operatortest.PeerPartition
	done []fault
}

func newFaults(g *group, rec *recorder) *faults {
	f := &faults{g: g, rec: rec, cuts: map[int]*operatortest.PeerPartition{}}
	var ports []int
	for _, r := range g.replicas {
		ports = append(ports, r.peerPort)
	}
	for i, r := range g.replicas {
		f.cuts[i] = operatortest.NewPeerPartition(g.t, r.ip, r.peerPort, ports)
	}
	return f
}

func (g *group) index(r *replicaProc) int { return slices.Index(g.replicas, r) }

// strike does kind to replica i (the leader when i < 0), for pause when it
// is a pause or a partition, and waits for the group to recover: every
// replica running again and voting.
func (f *faults) strike(kind faultKind, i int, pause time.Duration) fault {
	g := f.g
	g.t.Helper()
	leader := g.leader(startTimeout)
	if i < 0 {
		i = g.index(leader)
	}
	r := g.replicas[i]
	ft := fault{kind: kind, replica: i, leader: r == leader, at: f.rec.now()}
	switch kind {
	case sigkill:
		r.proc.Kill()
	case sigterm:
		r.proc.Signal(g.t, syscall.SIGTERM)
		if code := r.proc.WaitExit(g.t, time.Minute); code != 0 {
			g.t.Errorf("%s exited %d after SIGTERM, want 0", r.name, code)
		}
	case sigstop:
		r.proc.Signal(g.t, syscall.SIGSTOP)
		f.wait(pause)
		r.proc.Signal(g.t, syscall.SIGCONT)
		ft.healed = f.rec.now()
	case cut:
		f.cuts[i].Cut()
		ft.at = f.rec.now() // the filter is in place: the leader lease runs from here
		f.wait(pause)
		f.cuts[i].Heal()
		ft.healed = f.rec.now()
	}
	f.done = append(f.done, ft)
	f.recover()
	return ft
}

// wait lets a pause or a partition last d: the fault's length is the
// point, and the workload goes on meanwhile.
func (f *faults) wait(d time.Duration) {
	select {
	case <-time.After(d):
	case <-f.g.t.Context().Done():
	}
}

// recover restarts what exited (a leader that lost the lead after a pause
// or a partition exits by design) and waits until every replica votes.
func (f *faults) recover() {
	g := f.g
	g.t.Helper()
	// Twice: a process that was the leader may exit a moment after its
	// resume, once it learns of the new term.
	for range 2 {
		for _, r := range g.replicas {
			if !r.proc.Running() {
				g.start(r)
			}
		}
		g.voters(startTimeout)
	}
}

// settle waits until the workload has made n more calls: the gap between
// two faults, measured in work rather than time.
func (f *faults) settle(n int) {
	f.g.t.Helper()
	want := f.rec.len() + n
	eventually.Check(f.g.t, startTimeout, pollInterval, "the workload between faults", eventually.Holds(func() (bool, string) {
		return f.rec.len() >= want, fmt.Sprintf("%d calls, want %d", f.rec.len(), want)
	}))
}

// firstGrant is the first grant of an acquire sent after at, through a
// replica other than not (-1: any): how long after at it was answered,
// false if none was.
func firstGrant(calls []call, at time.Duration, not int) (time.Duration, bool) {
	best, found := time.Duration(0), false
	for _, c := range calls {
		if c.op.Kind == leasemodel.Acquire && c.op.Result == leasemodel.Ack && c.op.Call > at && c.replica != not {
			if d := c.op.Return - at; !found || d < best {
				best, found = d, true
			}
		}
	}
	return best, found
}

// notLeaderSpan is how long after at, and before until, the callers got
// NotLeader answers from the replicas other than stopped: from the first
// such answer's call to the last one's return; zero for none. The stopped
// replica's own answers are left out: it starts again meanwhile, and a
// starting replica answers NotLeader until it has synced, while the
// Service routes nothing to it.
func notLeaderSpan(calls []call, stopped int, at, until time.Duration) time.Duration {
	first, last := time.Duration(-1), time.Duration(0)
	for _, c := range calls {
		if c.code != "NotLeader" || c.replica == stopped || c.op.Call < at || c.op.Call > until {
			continue
		}
		if first < 0 || c.op.Call < first {
			first = c.op.Call
		}
		last = max(last, c.op.Return)
	}
	if first < 0 {
		return 0
	}
	return last - first
}

// notLeaderAnswers are the calls notLeaderSpan counts, each as when it
// was sent and answered, and by which replica.
func notLeaderAnswers(calls []call, stopped int, at, until time.Duration) []string {
	var out []string
	for _, c := range calls {
		if c.code == "NotLeader" && c.replica != stopped && c.op.Call >= at && c.op.Call <= until {
			out = append(out, fmt.Sprintf("%s [%v, %v] replica-%d", c.op.Kind, (c.op.Call-at).Round(time.Millisecond), (c.op.Return-at).Round(time.Millisecond), c.replica))
		}
	}
	return out
}

// acknowledgedAfter are the calls replica i acknowledged that were sent
// after at and answered before until (a call answered later may have been
// forwarded to the new leader once the cut healed).
func acknowledgedAfter(calls []call, i int, at, until time.Duration) []leasemodel.Op {
	var out []leasemodel.Op
	for _, c := range calls {
		if c.replica == i && c.op.Result == leasemodel.Ack && c.op.Call > at && c.op.Return < until {
			out = append(out, c.op)
		}
	}
	return out
}

// leaderLease is how long a leader cut from its peers may still act:
// Raft's leader lease (the default timers: the suite never sets them).
const leaderLease = replica.DefaultLeaderLeaseTimeout

// quantiles are the median and the worst of ds.
func quantiles(ds []time.Duration) (p50, worst time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}
