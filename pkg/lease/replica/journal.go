package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A log entry is one decision's effects: the batch format byte, the count,
// then each effect's encoding with its length. The working store's journal
// builds it under the store's lock and hands it to Raft when the decision
// is sealed, so the log's order is the order of the decisions.

// batchFormat is the log entry encoding's version.
const batchFormat = 1

// applyTimeout bounds how long a decision waits to be enqueued to Raft.
const applyTimeout = 5 * time.Second

// journal is the working store's store.Journal.
type journal struct {
	raft    *raft.Raft
	metrics Metrics
	batch   []byte
	count   int
	// logged counts the effects handed to the log, skipped the renewals
	// left out (for the metrics).
	logged, skipped int
}

func (j *journal) Append(b []byte, renewal bool) {
	if renewal {
		j.skipped++
		return
	}
	if j.count == 0 {
		j.batch = append(j.batch[:0], batchFormat)
	}
	j.batch = binary.AppendUvarint(j.batch, uint64(len(b)))
	j.batch = append(j.batch, b...)
	j.count++
	j.logged++
}

// Seal hands the decision's effects to the log as one entry.
func (j *journal) Seal() store.Pending {
	if j.count == 0 {
		return nil
	}
	entry := make([]byte, len(j.batch))
	copy(entry, j.batch)
	j.count = 0
	return pending{f: j.raft.Apply(entry, applyTimeout), sealed: time.Now(), metrics: j.metrics}
}

// pending is a decision's log entry on its way to being committed.
type pending struct {
	f       raft.ApplyFuture
	sealed  time.Time
	metrics Metrics
}

// Wait returns once the entry is committed and applied to the committed
// store, or with raft's error (this replica stopped leading, or shut
// down). Raft's future ends on its own in either case, so ctx is not
// watched: a goroutine per decision to watch it would cost more than the
// wait.
func (p pending) Wait(context.Context) error {
	err := p.f.Error()
	if err == nil {
		p.metrics.ObserveRaftCommit(time.Since(p.sealed))
	}
	return err
}

// ErrUnreadableLog: a log entry or snapshot this replica cannot read (a
// newer release's, met after a rollback).
var ErrUnreadableLog = errors.New("a log entry or snapshot this replica cannot read")

// errBadEntry is ErrUnreadableLog for a log entry.
var errBadEntry = fmt.Errorf("%w (a log entry)", ErrUnreadableLog)

// decodeBatch returns the effects of a log entry, or errBadEntry when it
// holds an effect reads does not read.
func decodeBatch(data []byte, reads store.Version) ([]store.Effect, error) {
	if len(data) == 0 || data[0] != batchFormat {
		return nil, fmt.Errorf("%w: format %v", errBadEntry, data[:min(1, len(data))])
	}
	var out []store.Effect
	for b := data[1:]; len(b) > 0; {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: a cut effect", errBadEntry)
		}
		if err := reads.CheckEffect(b[k : k+int(n)]); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadEntry, err)
		}
		e, err := store.DecodeEffect(b[k : k+int(n)])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadEntry, err)
		}
		out = append(out, e)
		b = b[k+int(n):]
	}
	return out, nil
}
