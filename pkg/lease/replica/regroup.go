package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A group that lost its quorum (most of its voters' Pods are gone) can
// elect no leader, and so cannot change its members either. The operator
// then regroups (docs/decisions/0384-lost-quorum-regroups-behind-the-horizon.md):
// one replica starts a new generation of the group alone, from its own log
// (RecoverAlone) or empty, and the others empty their directories
// (Wipe) and join it. The generation a directory belongs to is kept in it.

// generationFile holds, in a replica's directory, the generation of the
// group its log belongs to.
const generationFile = "generation"

// DirGeneration is the generation of the group the log in dir belongs to:
// zero for a directory without one (new, or from before generations).
func DirGeneration(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, generationFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	g, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, generationFile), err)
	}
	return g, nil
}

// SetDirGeneration records that the log in dir belongs to generation g.
func SetDirGeneration(dir string, g int64) error {
	tmp := filepath.Join(dir, generationFile+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(g, 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, generationFile))
}

// HasState says whether dir holds a Raft log or snapshot.
func HasState(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return false, err
	}
	defer bolt.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	return raft.HasExistingState(bolt, bolt, snaps)
}

// Wipe empties dir: its log belongs to a group that was given up.
func Wipe(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// RecoverAlone rewrites the log in cfg.Dir so that this replica is the
// only member of its group, keeping every entry it has: what it committed
// survives the regroup. Call it before New, on a replica that is not
// running.
func RecoverAlone(cfg Config) error {
	cfg = cfg.withDefaults()
	sc := cfg.Store
	sc.Follower, sc.Journal = true, nil
	st, err := store.New(sc)
	if err != nil {
		return err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.Dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("opening the raft log: %w", err)
	}
	defer bolt.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("opening the snapshots: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	_, transport := raft.NewInmemTransport(raft.ServerAddress(cfg.Advertise))
	alone := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(cfg.Advertise)}}}
	if err := raft.RecoverCluster(rc, &fsm{store: st, reads: cfg.Reads}, bolt, bolt, snaps, transport, alone); err != nil {
		return fmt.Errorf("recovering the log as a group of one: %w", err)
	}
	return nil
}
