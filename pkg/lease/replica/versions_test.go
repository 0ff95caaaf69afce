package replica

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// older plays the previous release of a future one: it reads neither this
// release's newest kind of effect (Promoted, the stand-in for a new kind)
// nor its newest snapshot format.
var older = store.Version{EffectFormat: store.EffectFormat, MaxKind: store.KindPromoted - 1, SnapshotFormat: 1}

// TestGroupVersion: the members and what each said it reads → what the
// stores may write.
func TestGroupVersion(t *testing.T) {
	members := []Member{{ID: "self", Voter: true}, {ID: "a", Voter: true}, {ID: "b"}}
	tests := []struct {
		name  string
		self  store.Version
		known map[string]store.Version
		want  store.Version
	}{
		{"every member of this release", store.ThisRelease, map[string]store.Version{"a": store.ThisRelease, "b": store.ThisRelease}, store.ThisRelease},
		{"an older follower (no vote) counts", store.ThisRelease, map[string]store.Version{"a": store.ThisRelease, "b": older}, older},
		{"a member never heard from reads the least", store.ThisRelease, map[string]store.Version{"a": store.ThisRelease}, store.Unadvertised},
		{"this replica is the older one", older, map[string]store.Version{"a": store.ThisRelease, "b": store.ThisRelease}, older},
		{"answers of former members do not count", store.ThisRelease, map[string]store.Version{"a": store.ThisRelease, "b": store.ThisRelease, "gone": older}, store.ThisRelease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := groupVersion("self", tt.self, members, tt.known)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("groupVersion (-want +got):\n%s", diff)
			}
		})
	}
}

// logKinds are the kinds of effect in n's log entries after index from.
func logKinds(t *testing.T, n *Node, from uint64) map[store.Kind]int {
	t.Helper()
	last, err := n.bolt.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	first, err := n.bolt.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[store.Kind]int{}
	for i := max(from+1, first); i <= last; i++ {
		var l raft.Log
		if err := n.bolt.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		effects, err := decodeBatch(l.Data, store.ThisRelease)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		for _, e := range effects {
			kinds[e.Kind()]++
		}
	}
	return kinds
}

// caughtUp waits until replica i has applied everything the leader l
// committed, without an entry it could not read.
func (g *group) caughtUp(i, l int) {
	g.t.Helper()
	eventually.Check(g.t, 10*time.Second, 10*time.Millisecond, "replica "+strconv.Itoa(i)+" caught up", eventually.Holds(func() (bool, string) {
		if err := g.nodes[i].Unreadable(); err != nil {
			g.t.Fatalf("replica %d: %v", i, err)
		}
		_, committed := g.nodes[l].Progress()
		applied, _ := g.nodes[i].Progress()
		return applied >= committed, "applied " + strconv.FormatUint(applied, 10) + " of " + strconv.FormatUint(committed, 10)
	}))
}

// retire stops replica i and has the leader remove it.
func (g *group) retire(i, leader int) {
	g.t.Helper()
	g.stop[i]()
	if err := g.nodes[i].Shutdown(); err != nil {
		g.t.Fatal(err)
	}
	if err := g.nodes[leader].Remove(g.nodes[i].cfg.ID); err != nil {
		g.t.Fatal(err)
	}
}

func (g *group) transferTo(from, to int) {
	g.t.Helper()
	n := g.nodes[to]
	if err := g.nodes[from].raft.LeadershipTransferToServer(raft.ServerID(n.cfg.ID), raft.ServerAddress(n.cfg.Advertise)).Error(); err != nil {
		g.t.Fatal(err)
	}
}

// kill stops the leader l and waits for the next one among the live
// replicas, which removes l; it returns the next leader.
func (g *group) kill(l int, dead ...int) int {
	g.t.Helper()
	g.stop[l]()
	if err := g.nodes[l].Shutdown(); err != nil {
		g.t.Fatal(err)
	}
	next := g.waitLeader(append(dead, l)...)
	if err := g.nodes[next].Remove(g.nodes[l].cfg.ID); err != nil {
		g.t.Fatal(err)
	}
	return next
}

// TestLeaderWritesWhatEveryMemberReads: an older replica joins a group of
// this release: it starts from a snapshot it reads, and while it is a
// member the leaders write no effect it would refuse (a new leader's
// Promoted is not produced); once it is gone, the next leader writes it.
// The leaders change by being stopped, as in TestFailoverKeepsLeasesBansAndState.
func TestLeaderWritesWhatEveryMemberReads(t *testing.T) {
	const olderReplica = 2
	g := emptyGroup(t)
	for i := range 5 {
		if i == olderReplica {
			g.startReading(i, older)
		} else {
			g.start(i)
		}
	}
	if err := g.nodes[0].Bootstrap(); err != nil {
		t.Fatal(err)
	}
	g.waitLeader()
	st := g.nodes[0].Working()
	for i := range 3 {
		st.Upsert(proxy("p" + strconv.Itoa(i)))
	}
	if kinds := logKinds(t, g.nodes[0], 0); kinds[store.KindPromoted] == 0 {
		t.Fatalf("the first leader wrote no Promoted: %v", kinds)
	}
	for i := 1; i < 5; i++ {
		if err := g.nodes[0].AddVoter(g.nodes[i].cfg.ID, g.nodes[i].cfg.Advertise); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.nodes[0].Working().Writes(); got != older {
		t.Fatalf("the leader writes for %v with an older member, want %v", got, older)
	}
	for i := 1; i < 5; i++ {
		g.caughtUp(i, 0)
	}
	if got := g.nodes[olderReplica].Committed().Proxies("", nil); len(got) != 3 {
		t.Errorf("the older member holds %d proxies, want 3", len(got))
	}
	_, joined := g.nodes[0].Progress()

	// A new leader, the older member still there: no Promoted.
	for i := 1; i < 5; i++ {
		eventually.Check(t, 10*time.Second, 10*time.Millisecond, "replica "+strconv.Itoa(i)+" knows the older member", eventually.Holds(func() (bool, string) {
			return g.nodes[i].Working().Writes() == older, "it writes for " + g.nodes[i].Working().Writes().String()
		}))
	}
	l1 := g.kill(0)
	if _, err := g.nodes[l1].Working().Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	g.caughtUp(olderReplica, l1)
	kinds := logKinds(t, g.nodes[l1], joined)
	if kinds[store.KindTermStart] == 0 || kinds[store.KindGrant] == 0 {
		t.Fatalf("the new leader's entries: %v, want its term and its grant", kinds)
	}
	if kinds[store.KindPromoted] != 0 {
		t.Errorf("the new leader wrote Promoted, which the older member does not read")
	}

	// The older member goes: the next leader writes Promoted again.
	dead, leader := []int{0, olderReplica}, l1
	if l1 == olderReplica {
		leader = g.kill(olderReplica, 0)
	} else {
		g.retire(olderReplica, l1)
	}
	live := []int{}
	for i := 1; i < 5; i++ {
		if i != olderReplica {
			live = append(live, i)
		}
	}
	for _, i := range live {
		eventually.Check(t, 10*time.Second, 10*time.Millisecond, "replica "+strconv.Itoa(i)+" writes for this release", eventually.Holds(func() (bool, string) {
			return g.nodes[i].Working().Writes() == store.ThisRelease, "it writes for " + g.nodes[i].Working().Writes().String()
		}))
	}
	_, gone := g.nodes[leader].Progress()
	next := g.kill(leader, dead...)
	if kinds := logKinds(t, g.nodes[next], gone); kinds[store.KindPromoted] != 1 {
		t.Errorf("the leader of a group of this release: %v, want one Promoted", kinds)
	}
}

// TestUnreadableEntryStopsTheReplica: a rollback onto a newer log (the
// older replica added without asking what it reads): it stops applying at
// the entry it cannot read, says which, makes no snapshot, and hands the
// lead on when elected instead of deciding on a state short of the log.
func TestUnreadableEntryStopsTheReplica(t *testing.T) {
	g := emptyGroup(t)
	g.start(0)
	g.startReading(1, older)
	g.start(2)
	if err := g.nodes[0].Bootstrap(); err != nil {
		t.Fatal(err)
	}
	g.waitLeader()
	for _, i := range []int{1, 2} { // as a release that does not ask would
		n := g.nodes[i]
		if err := g.nodes[0].raft.AddVoter(raft.ServerID(n.cfg.ID), raft.ServerAddress(n.cfg.Advertise), 0, 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	eventually.Check(t, 10*time.Second, 10*time.Millisecond, "replica 1 stops", eventually.Holds(func() (bool, string) {
		return g.nodes[1].Unreadable() != nil, "it still applies"
	}))
	err := g.nodes[1].Unreadable()
	if !errors.Is(err, ErrUnreadableLog) || !strings.Contains(err.Error(), "kind "+strconv.Itoa(int(store.KindPromoted))) {
		t.Errorf("Unreadable: %v, want ErrUnreadableLog naming kind %d", err, store.KindPromoted)
	}
	t.Logf("the older replica says: %v", err)
	if _, err := g.nodes[1].fsm.Snapshot(); !errors.Is(err, ErrUnreadableLog) {
		t.Errorf("a snapshot of the stopped store: %v, want ErrUnreadableLog", err)
	}
	// It applies nothing after: a proxy added now is not in its store.
	g.nodes[0].Working().Upsert(proxy("late"))
	g.caughtUp(2, 0)
	if got := g.nodes[1].Committed().Proxies("", nil); len(got) != 0 {
		t.Errorf("the stopped replica applied %d proxies after the entry it could not read", len(got))
	}

	// Elected, it hands the lead on. (A replica whose Run ended on losing
	// the lead stays a Raft member here; a process would restart.)
	g.transferTo(0, 2)
	if l := g.waitLeader(0); l != 2 {
		t.Fatalf("replica %d decides, want 2", l)
	}
	g.retire(0, 2)
	g.transferTo(2, 1)
	eventually.Check(t, 10*time.Second, 10*time.Millisecond, "the lead back on replica 2", eventually.Holds(func() (bool, string) {
		return g.nodes[2].IsLeader() && !g.nodes[1].IsLeader(), "replica 1 still leads, or nobody"
	}))
	if g.nodes[1].Deciding() {
		t.Error("the replica that cannot read the log decides")
	}
	select {
	case err := <-g.errs[1]:
		t.Errorf("the stopped replica's Run ended: %v", err)
	default:
	}
}
