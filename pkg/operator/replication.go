package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/replica"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// The lease store's replication across the operator's replicas
// (--lease-replication=raft; docs/decisions/0380-lease-store-replicated-with-raft.md):
// the flags, the node, and the membership loop that keeps the Raft group's
// members the operator's Pods.

// Lease replication modes (--lease-replication).
const (
	// ReplicationNone: the store lives in the leader's memory; a new leader
	// waits out the old one's leases (the horizon) and forgets the rest.
	ReplicationNone = "none"
	// ReplicationRaft: the store's state is replicated with Raft.
	ReplicationRaft = "raft"
)

// Names the replication keeps in the API server.
const (
	// PeerCASecret holds the CA of the replicas' peer port.
	PeerCASecret = "proxy-operator-peer-ca"
	// ReplicasConfigMap is the group's marker: created once, by the replica
	// that bootstraps the group (an atomic create, so one does).
	ReplicasConfigMap = "proxy-operator-replicas"
	// PeerAddressAnnotation is where each replica publishes, on its own
	// Pod, the address of its peer port.
	PeerAddressAnnotation = "crawl.proxyfleet.io/peer-address"
)

// membershipInterval is how often the leader looks at the Pods.
const membershipInterval = time.Second

// ReplicationOptions are the replication's flags.
type ReplicationOptions struct {
	// Mode is ReplicationNone or ReplicationRaft.
	Mode string
	// PeerAddr is where the peer port listens; PeerAdvertise how the other
	// replicas reach it (default: $POD_IP and PeerAddr's port).
	PeerAddr, PeerAdvertise string
	// ReplicaID is this replica's Raft ID (default: $POD_UID).
	ReplicaID string
	// RaftDir holds the log and snapshots: an emptyDir.
	RaftDir string
	// ReplicaSelector selects the operator's Pods in PodNamespace.
	ReplicaSelector string
	// The Raft timers (zero: pkg/lease/replica's defaults) and the most the
	// replicas' clocks may differ by.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout, MaxClockSkew time.Duration
}

func defaultReplicationOptions() ReplicationOptions {
	return ReplicationOptions{Mode: ReplicationNone, PeerAddr: ":7400", ReplicaID: os.Getenv("POD_UID"),
		RaftDir: "/var/lib/proxy-operator/raft", ReplicaSelector: "app.kubernetes.io/name=proxy-operator",
		HeartbeatTimeout: replica.DefaultHeartbeatTimeout, ElectionTimeout: replica.DefaultElectionTimeout,
		LeaderLeaseTimeout: replica.DefaultLeaderLeaseTimeout, MaxClockSkew: replica.DefaultMaxClockSkew}
}

// AddFlags registers the replication's flags.
func (o *ReplicationOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Mode, "lease-replication", o.Mode, `How the lease store outlives its leader: "raft" (its state is replicated across the replicas: a failover in about a second, nothing lost) or "none" (it lives in the leader's memory).`)
	fs.StringVar(&o.PeerAddr, "peer-addr", o.PeerAddr, "Address of the replicas' peer port (Raft and forwarded lease calls, mutual TLS), with --lease-replication=raft.")
	fs.StringVar(&o.PeerAdvertise, "peer-advertise", o.PeerAdvertise, "How the other replicas reach this one's peer port. Default: $POD_IP and --peer-addr's port.")
	fs.StringVar(&o.ReplicaID, "replica-id", o.ReplicaID, "This replica's member ID in the Raft group. Default: $POD_UID.")
	fs.StringVar(&o.RaftDir, "raft-dir", o.RaftDir, "Directory of the Raft log and snapshots (an emptyDir: they live as long as the Pod).")
	fs.StringVar(&o.ReplicaSelector, "replica-selector", o.ReplicaSelector, "Label selector of the operator's Pods in --pod-namespace: the replicas of the Raft group.")
	fs.DurationVar(&o.HeartbeatTimeout, "raft-heartbeat-timeout", o.HeartbeatTimeout, "How long a follower goes without the leader before it stands for election.")
	fs.DurationVar(&o.ElectionTimeout, "raft-election-timeout", o.ElectionTimeout, "How long a candidate waits for votes before it stands again.")
	fs.DurationVar(&o.LeaderLeaseTimeout, "raft-leader-lease-timeout", o.LeaderLeaseTimeout, "How long a leader goes without a quorum before it steps down (less than --raft-election-timeout).")
	fs.DurationVar(&o.MaxClockSkew, "max-clock-skew", o.MaxClockSkew, "The most the replicas' clocks may differ by: a new leader adds it to the ends of leases, cool-downs and intervals.")
}

// validate names what is wrong with the replication's flags.
func (o ReplicationOptions) validate(podNamespace string) []error {
	var errs []error
	switch o.Mode {
	case ReplicationNone:
		return nil
	case ReplicationRaft:
	default:
		return []error{fmt.Errorf("--lease-replication: %q is none of none, raft", o.Mode)}
	}
	if o.ReplicaID == "" {
		errs = append(errs, errors.New("--lease-replication=raft needs --replica-id (or $POD_UID)"))
	}
	if podNamespace == "" {
		errs = append(errs, errors.New("--lease-replication=raft needs --pod-namespace (or $POD_NAMESPACE), where its replicas' Pods are"))
	}
	if o.LeaderLeaseTimeout >= o.ElectionTimeout {
		errs = append(errs, fmt.Errorf("--raft-leader-lease-timeout %v must be less than --raft-election-timeout %v", o.LeaderLeaseTimeout, o.ElectionTimeout))
	}
	if _, err := o.advertise(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// advertise is the peer address the other replicas reach this one at.
func (o ReplicationOptions) advertise() (string, error) {
	if o.PeerAdvertise != "" {
		return o.PeerAdvertise, nil
	}
	_, port, err := net.SplitHostPort(o.PeerAddr)
	if err != nil {
		return "", fmt.Errorf("--peer-addr %q: %w", o.PeerAddr, err)
	}
	ip := os.Getenv("POD_IP")
	if ip == "" {
		return "", errors.New("--lease-replication=raft needs --peer-advertise (or $POD_IP)")
	}
	return net.JoinHostPort(ip, port), nil
}

// newReplicaNode starts this replica's node: the peers' CA from its Secret
// (made by the first replica), a certificate of this replica's, Raft.
func newReplicaNode(ctx context.Context, o Options, kube kubernetes.Interface, sc store.Config, onLead func(*store.Store), m replica.Metrics) (*replica.Node, error) {
	var ca replica.CA
	err := untilAPIAnswers(ctx, "peers CA", func(ctx context.Context) (err error) {
		ca, err = failover.EnsurePeerCA(ctx, kube, o.LeaderElectNamespace, PeerCASecret)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("peers CA: %w", err)
	}
	r := o.Replication
	tlsConfig, err := ca.PeerTLS(r.ReplicaID, time.Now())
	if err != nil {
		return nil, err
	}
	advertise, err := r.advertise()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.RaftDir, 0o700); err != nil {
		return nil, fmt.Errorf("--raft-dir: %w", err)
	}
	return replica.New(ctx, replica.Config{
		ID: r.ReplicaID, Listen: r.PeerAddr, Advertise: advertise, Dir: r.RaftDir, TLS: tlsConfig, Store: sc,
		HeartbeatTimeout: r.HeartbeatTimeout, ElectionTimeout: r.ElectionTimeout, LeaderLeaseTimeout: r.LeaderLeaseTimeout,
		MaxClockSkew: r.MaxClockSkew, OnLead: onLead, Metrics: m,
	})
}

// membership keeps the Raft group the operator's Pods.
type membership struct {
	node      *replica.Node
	kube      kubernetes.Interface
	namespace string
	pod       string
	selector  string
	advertise string
	id        string
	// markerNamespace holds ReplicasConfigMap.
	markerNamespace string
}

// run publishes this replica's peer address on its Pod, bootstraps the
// group if no replica has (the marker's create decides who), and then,
// whenever this replica leads, plans and applies the group's changes.
func (m *membership) run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("membership")
	if err := untilAPIAnswers(ctx, "peer address", m.publish); err != nil {
		return err
	}
	if err := untilAPIAnswers(ctx, "replicas marker", m.bootstrapIfFirst); err != nil {
		return err
	}
	t := time.NewTicker(membershipInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !m.node.Deciding() {
			continue
		}
		if err := m.reconcile(ctx, logger); err != nil {
			logger.Error(err, "Keeping the lease store's replicas")
		}
	}
}

func (m *membership) publish(ctx context.Context) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{PeerAddressAnnotation: m.advertise}}})
	if err != nil {
		return err
	}
	_, err = m.kube.CoreV1().Pods(m.namespace).Patch(ctx, m.pod, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "proxy-operator"})
	return err
}

// bootstrapIfFirst bootstraps a group of this replica alone if it creates
// the marker; any other replica waits for the leader to add it.
func (m *membership) bootstrapIfFirst(ctx context.Context) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.markerNamespace, Name: ReplicasConfigMap},
		Data:       map[string]string{"bootstrappedBy": m.id, "bootstrappedAt": time.Now().UTC().Format(time.RFC3339)},
	}
	_, err := m.kube.CoreV1().ConfigMaps(m.markerNamespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: "proxy-operator"})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return err
	}
	klog.FromContext(ctx).Info("Bootstrapping the lease store's Raft group", "replica", m.id)
	return m.node.Bootstrap()
}

// reconcile applies one plan of the group's changes.
func (m *membership) reconcile(ctx context.Context, logger klog.Logger) error {
	pods, err := m.kube.CoreV1().Pods(m.namespace).List(ctx, metav1.ListOptions{LabelSelector: m.selector})
	if err != nil {
		return err
	}
	var replicas []replicaPod
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		replicas = append(replicas, replicaPod{UID: string(p.UID), Address: p.Annotations[PeerAddressAnnotation], Gone: p.DeletionTimestamp != nil})
	}
	raftMembers, err := m.node.Members()
	if err != nil {
		return err
	}
	applied, _ := m.node.Progress()
	members := make([]member, 0, len(raftMembers))
	for _, rm := range raftMembers {
		mb := member{ID: rm.ID, Address: rm.Address, Voter: rm.Voter, Applied: -1}
		if !rm.Voter {
			if a, err := m.node.PeerProgress(ctx, rm.Address); err == nil {
				mb.Applied = int64(a)
			}
		}
		members = append(members, mb)
	}
	for _, a := range planMembership(m.id, replicas, members, int64(applied)) {
		logger.Info("Changing the lease store's replicas", "change", a.Kind, "replica", a.ID, "address", a.Address)
		switch a.Kind {
		case addFollower:
			err = m.node.AddFollower(a.ID, a.Address)
		case addVoter:
			err = m.node.AddVoter(a.ID, a.Address)
		case remove:
			err = m.node.Remove(a.ID)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", a.Kind, a.ID, err)
		}
	}
	return nil
}

// replicaReady says whether this replica may take lease calls: it leads,
// or it votes and has followed the log to within maxLag of its commit.
func replicaReady(node *replica.Node, id string) bool {
	if node.Deciding() {
		return true
	}
	members, err := node.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		if m.ID == id {
			applied, committed := node.Progress()
			return m.Voter && committed-applied <= maxLag && committed > 0
		}
	}
	return false
}

// waitToDecide waits until this replica leads the lease store's Raft
// group, or ctx ends (its error).
func (op *operator) waitToDecide(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !op.replica.Deciding() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
