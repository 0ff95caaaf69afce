package operator

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// leadershipFence knows, on this replica's own clock, until when it surely
// still leads: the send time of its last successful write of the leader
// Lease as holder, plus the renew deadline. A standby takes over no sooner
// than the lease duration after it saw that write, which it cannot see
// before it was sent; so the lease store, stopping at the fence, stops
// (lease duration − renew deadline) before anyone else can lead, whatever
// client-go's elector has noticed yet
// (docs/decisions/0190-lease-store-fences-itself.md).
type leadershipFence struct {
	clock    clock.PassiveClock
	validFor time.Duration
	// until is nil until the first write as holder; the time keeps its
	// monotonic reading, so wall-clock steps do not move the fence.
	until atomic.Pointer[time.Time]
}

func newLeadershipFence(c clock.PassiveClock, renewDeadline time.Duration) *leadershipFence {
	return &leadershipFence{clock: c, validFor: renewDeadline}
}

// ValidUntil is when this replica's leadership may have passed to another;
// the zero time when it never held the Lease.
func (f *leadershipFence) ValidUntil() time.Time {
	if t := f.until.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// validUntilFunc is ValidUntil for the lease store; nil for a nil fence
// (no leader election), which the store takes as never fenced.
func (f *leadershipFence) validUntilFunc() func() time.Time {
	if f == nil {
		return nil
	}
	return f.ValidUntil
}

// wrap returns lock, recording every write of it.
func (f *leadershipFence) wrap(lock resourcelock.Interface) resourcelock.Interface {
	return &fencedLock{Interface: lock, fence: f}
}

// record notes a write sent at sent: one that made this replica the holder
// moves the fence on; one that released the Lease ends it now.
func (f *leadershipFence) record(sent time.Time, holder, self string) {
	until := sent.Add(f.validFor)
	if holder != self {
		until = time.Time{}
	}
	f.until.Store(&until)
}

// fencedLock is the leader Lease lock, telling its fence of every
// successful write. The elector acquires and renews with Create and Update;
// with ReleaseOnCancel it releases with an Update naming no holder.
type fencedLock struct {
	resourcelock.Interface
	fence *leadershipFence
}

func (l *fencedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.tracked(rec, func() error { return l.Interface.Create(ctx, rec) })
}

func (l *fencedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.tracked(rec, func() error { return l.Interface.Update(ctx, rec) })
}

// tracked runs the write of rec and, if it succeeded, records it with the
// time it was sent.
func (l *fencedLock) tracked(rec resourcelock.LeaderElectionRecord, write func() error) error {
	sent := l.fence.clock.Now()
	if err := write(); err != nil {
		return err
	}
	l.fence.record(sent, rec.HolderIdentity, l.Identity())
	return nil
}
