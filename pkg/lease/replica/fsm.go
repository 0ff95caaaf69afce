package replica

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// fsm is Raft's state machine: the committed store, a follower store that
// applies every committed entry, on every replica (the leader's included).
type fsm struct {
	store *store.Store
	// reads is what this replica reads (Config.Reads).
	reads store.Version
	// broken is set once an entry could not be applied (a newer release's
	// effect): the committed store applies nothing more, and makes no
	// snapshot, rather than follow on a state that differs from its peers'
	// (Node.Unreadable). A snapshot it reads, restored, mends it.
	broken atomic.Pointer[error]
	// applied counts the entries applied, for the metrics.
	applied atomic.Uint64
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if err := f.broken.Load(); err != nil {
		return *err
	}
	effects, err := decodeBatch(l.Data, f.reads)
	if err != nil {
		err = fmt.Errorf("log entry %d: %w", l.Index, err)
		f.broken.CompareAndSwap(nil, &err)
		return err
	}
	f.store.Apply(followerEffects(effects)...)
	f.applied.Add(1)
	return nil
}

// Snapshot encodes the committed store now (under its lock, into memory)
// and writes it out later, in Persist, so Raft's applies go on meanwhile.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.broken.Load(); err != nil {
		// It would claim the entries this store did not apply.
		return nil, *err
	}
	var b bytes.Buffer
	if err := f.store.Snapshot(&b); err != nil {
		return nil, err
	}
	return snapshot(b.Bytes()), nil
}

func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if format, err := store.SnapshotFormatOf(b); err == nil && format > f.reads.SnapshotFormat {
		err := fmt.Errorf("%w: snapshot format %d (this replica reads up to %d)", ErrUnreadableLog, format, f.reads.SnapshotFormat)
		f.broken.CompareAndSwap(nil, &err)
		return err
	}
	if err := f.store.Restore(bytes.NewReader(b)); err != nil {
		return err
	}
	f.broken.Store(nil) // the whole state is the snapshot's
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
