package replica

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Defaults of Config's timers: a failover within two seconds
// (docs/decisions/0380-lease-store-replicated-with-raft.md).
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	// DefaultMaxClockSkew is how far apart the replicas' clocks may be.
	DefaultMaxClockSkew = 2 * time.Second
)

// ErrLostLeadership ends Run on a replica that led and stopped: its working
// store may hold decisions the log never took, so the process starts again
// from its snapshot and log.
var ErrLostLeadership = errors.New("stopped leading the lease store's replicas")

// Config configures a Node.
type Config struct {
	// ID is this replica's Raft server ID: its Pod's UID, so that a Pod
	// whose container restarts is the same member, and a new Pod a new one.
	ID string
	// Listen is the peer port's address; Advertise is how the peers reach
	// it (the Pod's IP and the port). When Listen names one IP, the
	// replica's dials to its peers come from that IP too.
	Listen, Advertise string
	// Dir holds the Raft log and snapshots: an emptyDir, which lives as
	// long as the Pod.
	Dir string
	// TLS is the peer port's: this replica's certificate, the peers' CA as
	// RootCAs and ClientCAs, client certificates required and verified.
	TLS *tls.Config
	// Store configures the stores; Journal and Follower are the Node's.
	Store store.Config
	// The Raft timers; zero takes the defaults above.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// MaxClockSkew is what a new leader adds to the ends of leases,
	// cool-downs and intervals (store.Store.Promote).
	MaxClockSkew time.Duration
	// SnapshotThreshold is how many entries after the last snapshot make
	// the next one; zero: 8,192.
	SnapshotThreshold uint64
	// OnLead, if set, is told (on its own goroutine) of the working store
	// once this replica decides: the operator feeds it its informers' view.
	OnLead func(*store.Store)
	// Metrics receives the replication's measurements; nil: none.
	Metrics Metrics
	// Reads is what this replica reads of the log and snapshots; zero:
	// store.ThisRelease. Only a test sets it, to play a replica of an
	// older release.
	Reads store.Version
	// RecoverUntil, on the replica that regrouped a group which had lost
	// its quorum, is when every lease the old group could have granted
	// has ended: its working store grants nothing before (it re-learns
	// the live leases from their renewals). Zero: no recovery.
	RecoverUntil time.Time
}

// Metrics receives the replication's measurements; pkg/metrics implements it.
type Metrics interface {
	SetRaftLeader(leading bool)
	ObserveRaftLeaderChange()
	ObserveRaftCommit(time.Duration)
	SetRaftProgress(applied, committed uint64)
	SetRaftMembers(voters, followers int)
	SetRaftUnreadable(bool)
}

type noMetrics struct{}

func (noMetrics) SetRaftLeader(bool)              {}
func (noMetrics) ObserveRaftLeaderChange()        {}
func (noMetrics) ObserveRaftCommit(time.Duration) {}
func (noMetrics) SetRaftProgress(uint64, uint64)  {}
func (noMetrics) SetRaftMembers(int, int)         {}
func (noMetrics) SetRaftUnreadable(bool)          {}

// Node is one replica of the lease store.
type Node struct {
	cfg       Config
	logger    klog.Logger
	raft      *raft.Raft
	fsm       *fsm
	peers     *peerListener
	transport *raft.NetworkTransport
	bolt      *raftboltdb.BoltStore
	// working is the store that decides once this replica leads: one
	// object from the start (a follower, empty), so that whoever holds it
	// (the feed, the controllers) holds it across the promotion.
	working *store.Store
	// promoted: working is a copy of the committed store and decides.
	promoted atomic.Bool
	// journal is the working store's.
	journal *journal
	// router sends lease calls to the leader; its client also asks peers
	// for their progress.
	router *Router
	// leaderEra ends at the next change of the leader this replica
	// knows: a call forwarded to a leader that was stopped or cut off is
	// sent again to the next one at once, not left hanging until its
	// deadline.
	leaderEra atomic.Pointer[era]
	// versions is what each member last said it reads (versions.go).
	versions versions
}

// era is a context that ends at the next change of leader.
type era struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newEra() *era {
	ctx, cancel := context.WithCancel(context.Background())
	return &era{ctx: ctx, cancel: cancel}
}

// currentEra ends when the leader this replica knows changes.
func (n *Node) currentEra() context.Context { return n.leaderEra.Load().ctx }

// nextEra ends the current era: the leader this replica knows changed.
func (n *Node) nextEra() { n.leaderEra.Swap(newEra()).cancel() }

// New opens the replica's log and snapshots in cfg.Dir, listens on the
// peer port and starts Raft. It bootstraps no group: see Bootstrap.
func New(ctx context.Context, cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	logger := klog.FromContext(ctx).WithName("replica")
	sc := cfg.Store
	sc.Follower, sc.Journal = true, nil
	committed, err := store.New(sc)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, logger: logger, fsm: &fsm{store: committed, reads: cfg.Reads}, journal: &journal{metrics: cfg.Metrics}}
	n.router = &Router{node: n, client: peerClient(cfg.TLS, dialFrom(cfg.Listen))}
	n.leaderEra.Store(newEra())
	sc.Journal = n.journal
	if n.working, err = store.New(sc); err != nil {
		return nil, err
	}
	if n.peers, err = listenPeers(cfg.Listen, cfg.Advertise, cfg.TLS); err != nil {
		return nil, err
	}
	if err := n.startRaft(); err != nil {
		n.peers.Close()
		return nil, err
	}
	go func() {
		if err := servePeerHTTP(n.peers, n.PeerHandler()); err != nil {
			logger.Error(err, "Serving the peer port")
		}
	}()
	return n, nil
}

func (c Config) withDefaults() Config {
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Reads == (store.Version{}) {
		c.Reads = store.ThisRelease
	}
	return c
}

func (n *Node) startRaft() error {
	hlog := hclogTo(n.logger)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout, n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.TrailingLogs = n.cfg.SnapshotThreshold
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raft configuration: %w", err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.cfg.Dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("opening the raft log: %w", err)
	}
	logs, err := raft.NewLogCache(512, bolt)
	if err != nil {
		bolt.Close()
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.Dir, 2, hlog)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("opening the snapshots: %w", err)
	}
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: newStreamLayer(n.peers, n.cfg.TLS, dialFrom(n.cfg.Listen)), MaxPool: 3, Timeout: 2 * time.Second, Logger: hlog,
	})
	r, err := raft.NewRaft(rc, n.fsm, logs, bolt, snaps, n.transport)
	if err != nil {
		bolt.Close()
		n.transport.Close()
		return fmt.Errorf("starting raft: %w", err)
	}
	n.raft, n.bolt = r, bolt
	n.journal.raft = r
	return nil
}

// Bootstrap makes this replica the first member of a new group, unless it
// already has a log or snapshot (it is a member already). Only one replica
// may do it: the operator lets the Kubernetes Lease's holder.
func (n *Node) Bootstrap() error {
	cfg := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(n.cfg.ID), Address: raft.ServerAddress(n.cfg.Advertise)}}}
	err := n.raft.BootstrapCluster(cfg).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// Run follows Raft's leadership until ctx ends (nil) or this replica stops
// leading after it led (ErrLostLeadership). On becoming leader it waits for
// the log's earlier entries to be applied, copies the committed store into
// a working store, promotes it and tells OnLead. Meanwhile it keeps the
// stores writing what every member reads (versions.go).
//
// A replica that meets an entry it cannot read (a rollback onto a newer
// log) stops applying the log, says so once (log and metric; Unreadable
// keeps it from being ready) and stays a member that never leads: it
// hands the lead on when elected, and Run ends with the error when it
// cannot.
func (n *Node) Run(ctx context.Context) error {
	go n.followVersions(ctx)
	led, told := false, false
	check := time.NewTicker(time.Second)
	defer check.Stop()
	changes := make(chan raft.Observation, 8)
	observer := raft.NewObserver(changes, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(observer)
	defer n.raft.DeregisterObserver(observer)
	defer n.cfg.Metrics.SetRaftLeader(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			n.nextEra()
			n.cfg.Metrics.ObserveRaftLeaderChange()
		case <-check.C:
			n.observe()
		case leading := <-n.raft.LeaderCh():
			switch {
			case leading && !led:
				err := n.lead()
				if errors.Is(err, ErrUnreadableLog) {
					if terr := n.raft.LeadershipTransfer().Error(); terr != nil {
						return fmt.Errorf("elected while unable to read the log, and could not hand the lead on (%w): %w", terr, err)
					}
					break
				}
				if err != nil {
					return err
				}
				led = true
			case !leading && led:
				return ErrLostLeadership
			}
		}
		err := n.Unreadable()
		if err == nil && told { // mended by a snapshot it reads
			told = false
			n.cfg.Metrics.SetRaftUnreadable(false)
		}
		if err != nil && !told {
			told = true
			n.cfg.Metrics.SetRaftUnreadable(true)
			n.logger.Error(err, "This replica stopped applying the lease store's log: it is not ready and will not lead. Roll the release forward, or empty its --raft-dir so that it starts from a snapshot it reads (docs/operations.md)",
				"reads", n.cfg.Reads.String())
		}
	}
}

// Unreadable is the error that stopped this replica's committed store
// (wrapping ErrUnreadableLog: an entry or a snapshot of a newer release),
// or nil while it follows the log.
func (n *Node) Unreadable() error {
	if err := n.fsm.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// lead makes the working store a copy of the committed one, once the
// log's earlier entries are applied, and promotes it.
func (n *Node) lead() error {
	start := time.Now()
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		return fmt.Errorf("waiting for the log before leading: %w", err)
	}
	if err := n.Unreadable(); err != nil {
		// Its committed store stopped short of the log: it must not decide.
		return err
	}
	var snap bytes.Buffer
	if err := n.fsm.store.Snapshot(&snap); err != nil {
		return err
	}
	size := snap.Len()
	if err := n.working.Restore(&snap); err != nil {
		return err
	}
	if err := n.working.Promote(n.cfg.MaxClockSkew); err != nil {
		return fmt.Errorf("promoting the working store: %w", err)
	}
	if time.Now().Before(n.cfg.RecoverUntil) {
		n.working.Lead(n.cfg.RecoverUntil, time.Time{})
		n.logger.Info("Recovering after the group was regrouped: no grants until every lease of the old group has ended", "recoverUntil", n.cfg.RecoverUntil)
	}
	n.promoted.Store(true)
	n.cfg.Metrics.SetRaftLeader(true)
	n.logger.Info("Leading the lease store's replicas", "term", n.raft.CurrentTerm(), "took", time.Since(start), "snapshotBytes", size)
	if n.cfg.OnLead != nil {
		go n.cfg.OnLead(n.working)
	}
	return nil
}

// observe publishes the replica's progress and the group's members.
func (n *Node) observe() {
	n.cfg.Metrics.SetRaftProgress(n.Progress())
	members, err := n.Members()
	if err != nil {
		return
	}
	voters := 0
	for _, m := range members {
		if m.Voter {
			voters++
		}
	}
	n.cfg.Metrics.SetRaftMembers(voters, len(members)-voters)
}

// Working is the store that decides while this replica leads; before, a
// follower that answers ErrNotLeader and takes no feed.
func (n *Node) Working() *store.Store { return n.working }

// Deciding says whether the working store decides now: this replica leads
// and has promoted it.
func (n *Node) Deciding() bool { return n.promoted.Load() && n.IsLeader() }

// Committed is the store that follows the log, on every replica.
func (n *Node) Committed() *store.Store { return n.fsm.store }

// Leader is the leader's server ID and peer address, empty when none is known.
func (n *Node) Leader() (id, address string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// IsLeader says whether this replica is Raft's leader now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// TransferLeadership hands the lead to the most caught-up peer, for a
// planned stop: the successor grants at once, with the whole state.
func (n *Node) TransferLeadership() error {
	return n.raft.LeadershipTransfer().Error()
}

// Shutdown stops Raft and closes the peer port and the log.
func (n *Node) Shutdown() error {
	err := n.raft.Shutdown().Error()
	n.peers.Close()
	return errors.Join(err, n.bolt.Close())
}

// hclogTo is Raft's logger writing to klog: its lines at V(2), its
// warnings and errors at V(0).
func hclogTo(logger klog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: klogWriter{logger}, DisableTime: true})
}

type klogWriter struct{ logger klog.Logger }

func (w klogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	if bytes.Contains(p, []byte("[ERROR]")) || bytes.Contains(p, []byte("[WARN]")) {
		w.logger.Info(line)
	} else {
		w.logger.V(2).Info(line)
	}
	return len(p), nil
}

// Member is one server of the group's configuration.
type Member struct {
	ID, Address string
	// Voter: it votes and counts for the quorum; else it only follows.
	Voter bool
}

// Members is the group's configuration as this replica knows it.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddFollower adds a member that follows without a vote: a new replica,
// until it has caught up (AddVoter then). The stores write for the group
// with it first (versions.go).
func (n *Node) AddFollower(id, address string) error {
	if err := n.admit(id, address); err != nil {
		return err
	}
	return n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(address), 0, 10*time.Second).Error()
}

// AddVoter gives a member a vote (or adds it with one).
func (n *Node) AddVoter(id, address string) error {
	if err := n.admit(id, address); err != nil {
		return err
	}
	return n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(address), 0, 10*time.Second).Error()
}

// Remove takes a member out of the group: its Pod is gone.
func (n *Node) Remove(id string) error {
	return n.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error()
}

// Progress is how far this replica's committed store has followed the log,
// and how far the log is committed as it knows.
func (n *Node) Progress() (applied, committed uint64) {
	return n.raft.AppliedIndex(), n.raft.CommitIndex()
}
