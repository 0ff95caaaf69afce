package cloudkit

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// Gate keeps a provider's calls within the cloud's rate limit: a token
// bucket for the steady rate, and a deadline a rate-limited answer sets
// (its Retry-After, or the time the cloud's bucket refills) before which no
// call leaves. Every call of a provider passes one Gate, so one 429 holds
// back every worker, as the cloud's per-project limit does.
type Gate struct {
	limiter *rate.Limiter
	clock   clock.Clock

	mu        sync.Mutex
	notBefore time.Time
}

// NewGate returns a Gate of perSecond calls a second with bursts of burst;
// perSecond <= 0 means no bucket (only Retry-After holds calls back).
func NewGate(perSecond float64, burst int, clk clock.Clock) *Gate {
	limit := rate.Limit(perSecond)
	if perSecond <= 0 {
		limit = rate.Inf
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Gate{limiter: rate.NewLimiter(limit, max(burst, 1)), clock: clk}
}

// Wait returns when a call may leave: past any deadline Defer set, and with
// a token from the bucket. It returns ctx's error if ctx ends first.
func (g *Gate) Wait(ctx context.Context) error {
	for {
		wait := g.NotBefore().Sub(g.clock.Now())
		if wait <= 0 {
			return g.limiter.Wait(ctx)
		}
		t := g.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// Defer holds every call back until until; an earlier deadline than one
// already set changes nothing.
func (g *Gate) Defer(until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until.After(g.notBefore) {
		g.notBefore = until
	}
}

// NotBefore is the deadline Defer set; zero for none.
func (g *Gate) NotBefore() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.notBefore
}
