package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
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
// (made by the first replica), a certificate of this replica's, its
// directory as the group's generation has it (planStart), Raft.
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
	cfg := replica.Config{
		ID: r.ReplicaID, Listen: r.PeerAddr, Advertise: advertise, Dir: r.RaftDir, TLS: tlsConfig, Store: sc,
		HeartbeatTimeout: r.HeartbeatTimeout, ElectionTimeout: r.ElectionTimeout, LeaderLeaseTimeout: r.LeaderLeaseTimeout,
		MaxClockSkew: r.MaxClockSkew, OnLead: onLead, Metrics: m,
	}
	bootstrap, err := prepareDir(ctx, kube, o.LeaderElectNamespace, &cfg)
	if err != nil {
		return nil, err
	}
	node, err := replica.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if bootstrap {
		if err := node.Bootstrap(); err != nil {
			node.Shutdown()
			return nil, fmt.Errorf("bootstrapping the new generation: %w", err)
		}
	}
	return node, nil
}

// prepareDir readies the replica's directory for the group's generation
// the marker names (planStart) and records the generation in it. It says
// whether the node must bootstrap a new generation alone, and sets
// cfg.RecoverUntil on the replica that starts one.
func prepareDir(ctx context.Context, kube kubernetes.Interface, namespace string, cfg *replica.Config) (bootstrap bool, err error) {
	var (
		m      marker
		exists bool
	)
	if err := untilAPIAnswers(ctx, "replicas marker", func(ctx context.Context) (err error) {
		m, exists, err = readMarker(ctx, kube, namespace)
		return err
	}); err != nil {
		return false, fmt.Errorf("reading ConfigMap %s: %w", ReplicasConfigMap, err)
	}
	if !exists {
		return false, nil // the first replicas: membership's bootstrap decides
	}
	dirGen, err := replica.DirGeneration(cfg.Dir)
	if err != nil {
		return false, err
	}
	hasState, err := replica.HasState(cfg.Dir)
	if err != nil {
		return false, fmt.Errorf("reading the raft log in %s: %w", cfg.Dir, err)
	}
	action := planStart(cfg.ID, m, dirGen, hasState)
	logger := klog.FromContext(ctx)
	logger.Info("Starting the lease store's replica", "generation", m.Generation, "directoryGeneration", dirGen, "hasLog", hasState, "action", action)
	switch action {
	case startWipe:
		if err := replica.Wipe(cfg.Dir); err != nil {
			return false, fmt.Errorf("emptying %s: %w", cfg.Dir, err)
		}
	case startRecoverAlone:
		if err := replica.RecoverAlone(*cfg); err != nil {
			return false, err
		}
	}
	if action == startRecoverAlone || action == startBootstrapAlone {
		cfg.RecoverUntil = m.BootstrappedAt.Add(cfg.Store.MaxTTL + cfg.MaxClockSkew)
	}
	if dirGen < m.Generation {
		if err := replica.SetDirGeneration(cfg.Dir, m.Generation); err != nil {
			return false, err
		}
	}
	return action == startBootstrapAlone, nil
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
	dir       string
	// markerNamespace holds ReplicasConfigMap.
	markerNamespace string
	// lostSince is when this replica first saw the group without a quorum
	// (zero: it has one, or it was not looked at).
	lostSince time.Time
	// toldUnreadable: the event that this replica cannot read the log is
	// recorded.
	toldUnreadable bool
}

// run publishes this replica's peer address on its Pod, bootstraps the
// group if no replica has (the marker's create decides who), and then,
// every second: while this replica leads, it plans and applies the
// group's changes; while it knows no leader, it looks for a lost quorum
// and a regroup (errRegroup ends the process).
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
		m.tellUnreadable(ctx)
		var err error
		switch leader, _ := m.node.Leader(); {
		case m.node.Deciding():
			err = m.reconcile(ctx, logger)
		case leader == "":
			err = m.watchQuorum(ctx, logger)
		default:
			m.lostSince = time.Time{}
		}
		if errors.Is(err, errRegroup) {
			return err
		}
		if err != nil {
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
	if _, exists, err := readMarker(ctx, m.kube, m.markerNamespace); err != nil || exists {
		return err
	}
	mk := marker{Generation: 1, Voters: []string{m.id}, BootstrappedBy: m.id, BootstrappedAt: time.Now()}
	if err := writeMarker(ctx, m.kube, m.markerNamespace, mk); apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := replica.SetDirGeneration(m.dir, 1); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Bootstrapping the lease store's Raft group", "replica", m.id)
	m.event(ctx, corev1.EventTypeNormal, "Bootstrapped", fmt.Sprintf("Replica %s (Pod %s) started the lease store's Raft group alone", m.id, m.pod))
	return m.node.Bootstrap()
}

// reconcile applies one plan of the group's changes, and writes the
// voters into the marker when they changed.
func (m *membership) reconcile(ctx context.Context, logger klog.Logger) error {
	m.lostSince = time.Time{}
	replicas, _, err := m.replicaPods(ctx)
	if err != nil {
		return err
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
			if st, err := m.node.PeerStatus(ctx, rm.Address); err == nil {
				mb.Applied = int64(st.Applied)
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
		m.event(ctx, corev1.EventTypeNormal, memberEventReasons[a.Kind], fmt.Sprintf("Replica %s at %s: %s", a.ID, a.Address, a.Kind))
	}
	return m.publishVoters(ctx)
}

// memberEventReasons are the events' reasons for the changes of members.
var memberEventReasons = map[string]string{addFollower: "ReplicaAdded", addVoter: "ReplicaVoting", remove: "ReplicaRemoved"}

// publishVoters writes the voters into the marker when they changed there,
// so that kubectl shows them and a replica can judge a lost quorum.
func (m *membership) publishVoters(ctx context.Context) error {
	st := m.node.Status()
	mk, exists, err := readMarker(ctx, m.kube, m.markerNamespace)
	if err != nil || !exists || sameVoters(mk.Voters, st.Voters) {
		return err
	}
	mk.Voters = st.Voters
	return writeMarker(ctx, m.kube, m.markerNamespace, mk)
}

// replicaPods are the operator's Pods as membership sees them, and the
// UIDs of those that exist (running, or about to).
func (m *membership) replicaPods(ctx context.Context) ([]replicaPod, map[string]bool, error) {
	pods, err := m.kube.CoreV1().Pods(m.namespace).List(ctx, metav1.ListOptions{LabelSelector: m.selector})
	if err != nil {
		return nil, nil, err
	}
	var replicas []replicaPod
	alive := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		alive[string(p.UID)] = true
		replicas = append(replicas, replicaPod{UID: string(p.UID), Address: p.Annotations[PeerAddressAnnotation], Gone: p.DeletionTimestamp != nil})
	}
	return replicas, alive, nil
}

// watchQuorum runs while this replica knows no leader. It returns
// errRegroup once the group has regrouped past this replica's generation,
// or once this replica has won the regroup of a group whose quorum has
// been lost for regroupAfter.
func (m *membership) watchQuorum(ctx context.Context, logger klog.Logger) error {
	mk, exists, err := readMarker(ctx, m.kube, m.markerNamespace)
	if err != nil || !exists {
		return err
	}
	dirGen, err := replica.DirGeneration(m.dir)
	if err != nil {
		return err
	}
	if mk.Generation > max(dirGen, 1) {
		logger.Info("The lease store's replicas regrouped; restarting to join", "generation", mk.Generation, "by", mk.BootstrappedBy)
		return errRegroup
	}
	replicas, alive, err := m.replicaPods(ctx)
	if err != nil {
		return err
	}
	self := m.node.Status()
	views, unreachable := []peerView{{Leader: self.Leader, Voters: self.Voters}}, 0
	for _, p := range replicas {
		if p.UID == m.id || p.Address == "" {
			continue
		}
		st, err := m.node.PeerStatus(ctx, p.Address)
		if err != nil {
			unreachable++
			continue
		}
		views = append(views, peerView{Leader: st.Leader, Voters: st.Voters})
	}
	if !quorumLost(mk.Voters, alive, views, unreachable) {
		m.lostSince = time.Time{}
		return nil
	}
	now := time.Now()
	if m.lostSince.IsZero() {
		m.lostSince = now
		logger.Info("The lease store's Raft group has lost its quorum: most voters' Pods are gone", "voters", mk.Voters)
	}
	wait := regroupAfter
	if self.Applied == 0 {
		wait += regroupFreshDelay
	}
	if now.Sub(m.lostSince) < wait {
		return nil
	}
	next := regrouped(mk, m.id, now)
	if err := writeMarker(ctx, m.kube, m.markerNamespace, next); apierrors.IsConflict(err) {
		return nil // another replica regrouped first: the next look sees it
	} else if err != nil {
		return err
	}
	m.event(ctx, corev1.EventTypeWarning, "Regrouped", fmt.Sprintf(
		"The lease store's Raft group lost its quorum (voters %s; most of their Pods are gone). Replica %s (Pod %s) starts generation %d from its log; no grants until every lease of the old group has ended",
		strings.Join(mk.Voters, ","), m.id, m.pod, next.Generation))
	return errRegroup
}

// tellUnreadable records, once, a warning that this replica stopped
// applying the log it cannot read (a rollback onto a newer log).
func (m *membership) tellUnreadable(ctx context.Context) {
	err := m.node.Unreadable()
	if err == nil || m.toldUnreadable {
		m.toldUnreadable = m.toldUnreadable && err != nil
		return
	}
	m.toldUnreadable = true
	m.event(ctx, corev1.EventTypeWarning, "LogUnreadable", fmt.Sprintf(
		"Replica %s (Pod %s) cannot read the lease store's log and stopped applying it; it is not ready and does not lead: %v. Roll the release forward, or delete this Pod so that it starts from a snapshot in a format it reads (docs/operations.md)",
		m.id, m.pod, err))
}

// event records an event on the marker, where `kubectl describe configmap
// proxy-operator-replicas` shows the group's story. It is written directly
// (not through the process's broadcaster, which only the controllers'
// leader starts), and a failure to write it is only logged.
func (m *membership) event(ctx context.Context, eventType, reason, message string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ReplicasConfigMap + ".", Namespace: m.markerNamespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: m.markerNamespace, Name: ReplicasConfigMap},
		Reason:         reason, Message: message, Type: eventType, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "proxy-operator", Host: m.pod},
		ReportingController: "proxyfleet.io/proxy-operator", ReportingInstance: m.pod,
	}
	if _, err := m.kube.CoreV1().Events(m.markerNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording an event of the lease store's replicas", "reason", reason)
	}
}

// replicaReady says whether this replica may take lease calls: it reads
// the log, and it leads, or it votes and has followed the log to within
// maxLag of its commit.
func replicaReady(node *replica.Node, id string) bool {
	if node.Unreadable() != nil {
		return false // it stopped applying the log
	}
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
