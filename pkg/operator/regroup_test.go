package operator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPlanStart(t *testing.T) {
	gen := func(g int64, by string) marker { return marker{Generation: g, BootstrappedBy: by} }
	for _, tc := range []struct {
		name     string
		m        marker
		dirGen   int64
		hasState bool
		want     startAction
	}{
		{"a restart in the same generation keeps its log", gen(1, "a"), 1, true, startKeep},
		{"a new replica waits to be added", gen(1, "a"), 0, false, startKeep},
		{"a new replica of a regrouped group waits to be added", gen(2, "a"), 0, false, startKeep},
		{"a log from before generations belongs to the first", gen(1, "a"), 0, true, startKeep},
		{"a log of a given-up generation is emptied", gen(2, "a"), 1, true, startWipe},
		{"a log from before generations, regrouped since, is emptied", gen(2, "a"), 0, true, startWipe},
		{"the regroup's winner leads from its log", gen(2, "self"), 1, true, startRecoverAlone},
		{"the regroup's winner without a log bootstraps", gen(3, "self"), 0, false, startBootstrapAlone},
		{"the regroup's winner whose log went bootstraps", gen(3, "self"), 2, false, startBootstrapAlone},
		{"the winner restarted after its regroup keeps its log", gen(2, "self"), 2, true, startKeep},
		{"a log newer than a remade marker keeps going", gen(1, "x"), 3, true, startKeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planStart("self", tc.m, tc.dirGen, tc.hasState); got != tc.want {
				t.Errorf("planStart = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestQuorumLost(t *testing.T) {
	alive := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name        string
		marker      []string
		alive       map[string]bool
		views       []peerView
		unreachable int
		want        bool
	}{
		{"a majority of Pods lives: an election will do", abc, alive("a", "b"), []peerView{{Voters: abc}}, 0, false},
		{"two of three Pods gone", abc, alive("a", "d"), []peerView{{Voters: abc}, {}}, 0, true},
		{"every Pod replaced", abc, alive("d", "e", "f"), []peerView{{}, {}, {}}, 0, true},
		{"one replica knows a leader", abc, alive("a", "d"), []peerView{{Voters: abc}, {Leader: "x"}}, 0, false},
		{"a replica did not answer: it may know better", abc, alive("a", "d"), []peerView{{Voters: abc}}, 1, false},
		{"the marker is stale but the replicas' configuration has a majority",
			abc, alive("c", "d", "e"), []peerView{{Voters: []string{"c", "d", "e"}}}, 0, false},
		{"half of four is no majority", []string{"a", "b", "c", "d"}, alive("a", "b"), nil, 0, true},
		{"nothing known: no judgement", nil, alive("a"), []peerView{{}}, 0, false},
		{"a group of one whose Pod is gone", []string{"a"}, alive("b"), []peerView{{}}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quorumLost(tc.marker, tc.alive, tc.views, tc.unreachable); got != tc.want {
				t.Errorf("quorumLost = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMarkerRoundTrip(t *testing.T) {
	m := marker{Generation: 3, Voters: []string{"a", "b"}, BootstrappedBy: "a", BootstrappedAt: time.Date(2026, 12, 7, 21, 0, 0, 5, time.UTC)}
	got, err := markerOf(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ReplicasConfigMap}, Data: m.data()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got, cmp.AllowUnexported(marker{})); diff != "" {
		t.Errorf("marker after a round trip (-want +got):\n%s", diff)
	}
	if _, err := markerOf(&corev1.ConfigMap{Data: map[string]string{markerGeneration: "zero"}}); err == nil {
		t.Error("a marker whose generation is not a number was read")
	}
}
