package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A Raft group whose voters' Pods are mostly gone can elect nobody, and so
// cannot change its members either: it has lost its quorum for good. The
// replicas then regroup (docs/decisions/0384-lost-quorum-regroups-behind-the-horizon.md):
// one of them wins the marker (ReplicasConfigMap) for a new generation,
// every replica restarts (the process exits; the kubelet starts it again
// with its emptyDir), the winner starts the new generation alone from its
// own log, the others empty theirs and join, and the new group grants
// nothing until every lease the old one could have granted has ended.

// The marker's keys.
const (
	markerGeneration     = "generation"
	markerVoters         = "voters"
	markerBootstrappedBy = "bootstrappedBy"
	markerBootstrappedAt = "bootstrappedAt"
)

// regroupAfter is how long a lost quorum must last before a replica with
// a log regroups; one without waits regroupFreshDelay more, so that a
// replica that keeps the fleet's memory wins when there is one.
const (
	regroupAfter      = 10 * time.Second
	regroupFreshDelay = 5 * time.Second
)

// errRegroup ends the process: the group regrouped, and this replica
// starts again into the new generation (planStart).
var errRegroup = errors.New("the lease store's replicas regrouped after a lost quorum; restarting to join the new generation")

// marker is what ReplicasConfigMap says of the group.
type marker struct {
	Generation int64
	// Voters are the voting members' IDs (Pod UIDs) as the leader last
	// wrote them.
	Voters []string
	// BootstrappedBy started this generation, at BootstrappedAt.
	BootstrappedBy string
	BootstrappedAt time.Time
	// resourceVersion fences a regroup: only one replica's update wins.
	resourceVersion string
}

func markerOf(cm *corev1.ConfigMap) (marker, error) {
	m := marker{Generation: 1, BootstrappedBy: cm.Data[markerBootstrappedBy], resourceVersion: cm.ResourceVersion}
	if g := cm.Data[markerGeneration]; g != "" {
		var err error
		if m.Generation, err = strconv.ParseInt(g, 10, 64); err != nil || m.Generation < 1 {
			return marker{}, fmt.Errorf("ConfigMap %s: %s %q is not a generation", cm.Name, markerGeneration, g)
		}
	}
	if v := cm.Data[markerVoters]; v != "" {
		m.Voters = strings.Split(v, ",")
	}
	if at := cm.Data[markerBootstrappedAt]; at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return marker{}, fmt.Errorf("ConfigMap %s: %s %q: %w", cm.Name, markerBootstrappedAt, at, err)
		}
		m.BootstrappedAt = t
	}
	return m, nil
}

func (m marker) data() map[string]string {
	return map[string]string{
		markerGeneration:     strconv.FormatInt(m.Generation, 10),
		markerVoters:         strings.Join(m.Voters, ","),
		markerBootstrappedBy: m.BootstrappedBy,
		markerBootstrappedAt: m.BootstrappedAt.UTC().Format(time.RFC3339Nano),
	}
}

// readMarker reads the marker; ok is false when there is none yet.
func readMarker(ctx context.Context, kube kubernetes.Interface, namespace string) (m marker, ok bool, err error) {
	cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, ReplicasConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return marker{}, false, nil
	}
	if err != nil {
		return marker{}, false, err
	}
	m, err = markerOf(cm)
	return m, err == nil, err
}

// writeMarker creates the marker (resourceVersion empty) or updates it if
// nobody changed it since it was read; a conflict is apierrors' own.
func writeMarker(ctx context.Context, kube kubernetes.Interface, namespace string, m marker) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ReplicasConfigMap, ResourceVersion: m.resourceVersion},
		Data:       m.data(),
	}
	var err error
	if m.resourceVersion == "" {
		_, err = kube.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: "proxy-operator"})
	} else {
		_, err = kube.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "proxy-operator"})
	}
	return err
}

// startAction is what a replica does with its directory at start.
type startAction string

const (
	// startKeep: the directory's log is the group's; start from it.
	startKeep startAction = "keep"
	// startWipe: the log belongs to a generation that was given up; empty
	// the directory and wait to be added to the new one.
	startWipe startAction = "wipe"
	// startRecoverAlone: this replica won the regroup; rewrite its log as a
	// group of one and lead the new generation from it.
	startRecoverAlone startAction = "recoverAlone"
	// startBootstrapAlone: this replica won the regroup with no log;
	// bootstrap the new generation empty.
	startBootstrapAlone startAction = "bootstrapAlone"
)

// planStart decides what a replica does with its directory: its log's
// generation (zero: none recorded) and whether it has a log, against the
// marker's generation and who started it. A directory from a newer
// generation than the marker's (the marker was deleted and made again)
// keeps its log: the group goes on, and the marker is written again.
func planStart(self string, m marker, dirGeneration int64, hasState bool) startAction {
	if dirGeneration == 0 && hasState {
		dirGeneration = 1 // a log from before generations were recorded
	}
	switch {
	case dirGeneration >= m.Generation:
		return startKeep
	case dirGeneration == 0 && !hasState:
		if m.Generation > 1 && m.BootstrappedBy == self {
			return startBootstrapAlone
		}
		return startKeep // new: it waits to be added
	case m.BootstrappedBy == self && hasState:
		return startRecoverAlone
	case m.BootstrappedBy == self:
		return startBootstrapAlone
	default:
		return startWipe
	}
}

// peerView is what one replica reported of the group (replica.Status).
type peerView struct {
	Leader string
	Voters []string
}

// quorumLost says whether the group can no longer elect a leader: no
// replica knows a leader, and under every configuration known (the
// marker's and each replica's own), fewer than a majority of the voters
// have a Pod. alive holds the UIDs of the operator's Pods that exist;
// unreachable counts the replicas with a Pod and an address that did not
// answer: one of them may lead or know better, so the answer is no.
func quorumLost(markerVoters []string, alive map[string]bool, views []peerView, unreachable int) bool {
	if unreachable > 0 {
		return false
	}
	configs := [][]string{markerVoters}
	for _, v := range views {
		if v.Leader != "" {
			return false
		}
		configs = append(configs, v.Voters)
	}
	known := false
	for _, voters := range configs {
		if len(voters) == 0 {
			continue
		}
		known = true
		n := 0
		for _, id := range voters {
			if alive[id] {
				n++
			}
		}
		if 2*n > len(voters) {
			return false
		}
	}
	return known
}

// regrouped is the marker of a new generation this replica starts.
func regrouped(m marker, self string, now time.Time) marker {
	return marker{Generation: m.Generation + 1, Voters: []string{self}, BootstrappedBy: self, BootstrappedAt: now,
		resourceVersion: m.resourceVersion}
}

// sameVoters compares two lists of voters as sets.
func sameVoters(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
