package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A `helm upgrade` runs replicas of two releases in one group, and a `helm
// rollback` brings an older release to a log a newer one wrote
// (docs/decisions/0385-effects-and-snapshots-versioned-per-group.md):
//
//   - Each replica answers what its release reads (store.Version) in its
//     Status on the peer port, which the replicas ask each other anyway.
//   - Every replica asks every member each second and keeps the last
//     answers, so that a replica that becomes leader knows, before its
//     first effect, what every member reads; a member never heard from
//     reads what a release before versions were advertised read
//     (store.Unadvertised), the least any replicated release reads.
//   - The stores write only what every member reads (store.Store.WriteFor).
//     When that drops, and before a member is added, the leader takes a
//     snapshot in the group's format and keeps no log behind it, so that
//     an older member starts from what it reads and never replays an
//     entry a newer leader wrote before.

// versionTimeout bounds one round of asking the members what they read.
const versionTimeout = 2 * time.Second

// versions is what each member last said it reads, by Raft ID.
type versions struct {
	mu    sync.Mutex
	known map[string]store.Version
}

func (v *versions) set(id string, ver store.Version) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.known == nil {
		v.known = map[string]store.Version{}
	}
	v.known[id] = ver
}

// snapshot copies the answers, for groupVersion.
func (v *versions) snapshot() map[string]store.Version {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]store.Version, len(v.known))
	for id, ver := range v.known {
		out[id] = ver
	}
	return out
}

// groupVersion is what every member of the group reads: self is this
// replica's own; a member with no answer in known (never reached, or of a
// release that does not say) counts as store.Unadvertised.
func groupVersion(selfID string, self store.Version, members []Member, known map[string]store.Version) store.Version {
	all := []store.Version{self}
	for _, m := range members {
		if m.ID == selfID {
			continue
		}
		v, ok := known[m.ID]
		if !ok {
			v = store.Unadvertised
		}
		all = append(all, v)
	}
	return store.Common(all...)
}

// readsOf is what a Status says its replica reads: a replica of a release
// before versions were advertised leaves it out.
func readsOf(st Status) store.Version {
	if st.Reads.Validate() != nil {
		return store.Unadvertised
	}
	return st.Reads
}

// askVersions asks every other member what it reads and keeps the answers
// of those that answer; one that does not keeps its last answer.
func (n *Node) askVersions(ctx context.Context) ([]Member, error) {
	members, err := n.Members()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		if m.ID == n.cfg.ID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := n.PeerStatus(ctx, m.Address); err == nil {
				n.versions.set(m.ID, readsOf(st))
			}
		}()
	}
	wg.Wait()
	return members, nil
}

// followVersions keeps the stores writing what the group reads, until ctx
// ends.
func (n *Node) followVersions(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if members, err := n.askVersions(ctx); err == nil {
			n.writeFor(groupVersion(n.cfg.ID, n.cfg.Reads, members, n.versions.snapshot()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// writeFor makes both stores write what v reads. On the leader, a drop
// makes a snapshot in v's format with no log kept behind it.
func (n *Node) writeFor(v store.Version) {
	prev := n.working.Writes()
	if v == prev {
		return
	}
	if err := errors.Join(n.fsm.store.WriteFor(v), n.working.WriteFor(v)); err != nil {
		n.logger.Error(err, "Writing for the group's replicas")
		return
	}
	n.logger.Info("The group's replicas read a different version: the store writes what every one reads", "was", prev.String(), "now", v.String())
	dropped := v.EffectFormat < prev.EffectFormat || v.MaxKind < prev.MaxKind || v.SnapshotFormat < prev.SnapshotFormat
	if dropped && n.IsLeader() {
		if err := n.compact(); err != nil {
			n.logger.Error(err, "Snapshotting in the format every replica reads")
		}
	}
}

// compact takes a snapshot of the committed store in the format it now
// writes and drops the whole log behind it: a member that joins later, or
// is far behind, starts from that snapshot, not from entries it may not
// read.
func (n *Node) compact() error {
	rc := n.raft.ReloadableConfig()
	trailing := rc.TrailingLogs
	rc.TrailingLogs = 0
	if err := n.raft.ReloadConfig(rc); err != nil {
		return err
	}
	defer func() {
		rc.TrailingLogs = trailing
		if err := n.raft.ReloadConfig(rc); err != nil {
			n.logger.Error(err, "Restoring the trailing logs")
		}
	}()
	// The barrier is a new entry after every one applied before the drop:
	// the snapshot covers them all.
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		return err
	}
	if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return err
	}
	return nil
}

// admit learns what a member about to be added reads, and makes the
// stores write for the group with it, before it follows the log.
func (n *Node) admit(id, address string) error {
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	v := store.Unadvertised
	if st, err := n.PeerStatus(ctx, address); err == nil {
		v = readsOf(st)
	}
	n.versions.set(id, v)
	members, err := n.Members()
	if err != nil {
		return fmt.Errorf("reading the members: %w", err)
	}
	members = append(members, Member{ID: id, Address: address})
	n.writeFor(groupVersion(n.cfg.ID, n.cfg.Reads, members, n.versions.snapshot()))
	return nil
}
