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
	// broken is set once an entry could not be applied (a newer release's
	// effect): the replica must stop rather than follow on a state that
	// differs from its peers'.
	broken atomic.Pointer[error]
	// applied counts the entries applied, for the metrics.
	applied atomic.Uint64
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	effects, err := decodeBatch(l.Data)
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
	var b bytes.Buffer
	if err := f.store.Snapshot(&b); err != nil {
		return nil, err
	}
	return snapshot(b.Bytes()), nil
}

func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	return f.store.Restore(r)
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
