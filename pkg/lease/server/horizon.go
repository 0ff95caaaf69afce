package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// The persisted horizon of this leader's term: claimed when it starts
// leading, kept ahead of every expiry the store hands out, and written
// last when it stops (see failover.HorizonStore).

// horizonKeeper keeps the persisted horizon ahead of every expiry the store
// hands out (see failover.HorizonStore).
type horizonKeeper struct {
	backend failover.HorizonStore
	store   *store.Store
	clock   clock.Clock
	step    time.Duration

	mu sync.Mutex
	// persisted is the horizon written last; floor the one inherited at the
	// claim, below which no write may go while its leases may live.
	persisted, floor time.Time
	stopped          bool
	extending        atomic.Bool
}

// errHorizon wraps failures to persist the horizon: grants wait for it.
var errHorizon = errors.New("cannot persist the lease horizon")

type claimed struct {
	horizon time.Time
	err     error // ErrHorizonUnknown, or nil
}

// claim claims the horizon, retrying with backoff until ctx ends.
func (h *horizonKeeper) claim(ctx context.Context) (claimed, error) {
	logger := klog.FromContext(ctx)
	backoff := 100 * time.Millisecond
	for {
		previous, err := h.backend.Claim(ctx)
		if err == nil || errors.Is(err, failover.ErrHorizonUnknown) {
			if err != nil {
				logger.Error(err, "The previous lease horizon is unreadable; assuming the maximum TTL")
			}
			h.mu.Lock()
			h.floor, h.persisted, h.stopped = previous, previous, false
			h.mu.Unlock()
			return claimed{horizon: previous, err: err}, nil
		}
		logger.Error(err, "Claiming the lease horizon; retrying", "backoff", backoff)
		t := h.clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return claimed{}, fmt.Errorf("claiming the lease persisted: %w", ctx.Err())
		case <-t.C():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (h *horizonKeeper) current() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.persisted.IsZero() {
		// Nothing persisted: nothing may be granted until ensure writes.
		return h.clock.Now()
	}
	return h.persisted
}

// ensure persists a horizon of at least need (plus a step, so that the next
// grants need no write) and passes it to the store.
func (h *horizonKeeper) ensure(ctx context.Context, need time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !need.After(h.persisted) {
		h.store.SetHorizon(h.persisted)
		return nil
	}
	if h.stopped {
		return store.ErrNotLeader
	}
	target := need.Add(h.step)
	if h.floor.After(target) {
		target = h.floor
	}
	ctx, cancel := context.WithTimeout(ctx, horizonSaveTimeout)
	defer cancel()
	if err := h.backend.Save(ctx, target); err != nil {
		return fmt.Errorf("%w: %w", errHorizon, err)
	}
	h.persisted = target
	h.store.SetHorizon(target)
	return nil
}

// keepAhead extends the horizon in the background when an expiry comes
// within half a step of it, so that grants rarely wait for a write. The
// write logs to reqCtx's logger but outlives the request.
func (h *horizonKeeper) keepAhead(reqCtx context.Context, expiresAt time.Time) {
	h.mu.Lock()
	low := h.persisted.Sub(expiresAt) < h.step/2
	h.mu.Unlock()
	if !low || !h.extending.CompareAndSwap(false, true) {
		return
	}
	ctx := klog.NewContext(context.Background(), klog.FromContext(reqCtx))
	go func() {
		defer h.extending.Store(false)
		if err := h.ensure(ctx, expiresAt.Add(h.step/2)); err != nil && !errors.Is(err, store.ErrNotLeader) {
			klog.FromContext(ctx).Error(err, "Extending the lease horizon ahead of time")
		}
	}()
}

// finish persists the latest live expiry at the end of a term (the floor
// while inherited leases may still live), so that the successor waits no
// longer than needed.
func (h *horizonKeeper) finish(ctx context.Context, lastExpiry time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	final := lastExpiry
	if h.floor.After(final) {
		final = h.floor
	}
	ctx, cancel := context.WithTimeout(ctx, horizonSaveTimeout)
	defer cancel()
	if err := h.backend.Save(ctx, final); err != nil {
		if errors.Is(err, failover.ErrHorizonLost) {
			// The successor claimed already: it read our persisted horizon, which is later still.
			return nil
		}
		return fmt.Errorf("persisting the final lease horizon: %w", err)
	}
	h.persisted = final
	return nil
}
