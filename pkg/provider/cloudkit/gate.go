package cloudkit

import (
	"context"
	"errors"
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

// Call runs one API call through the gate, again after each rate-limited
// answer (up to maxAttempts), never before the time that answer named:
// its Error.RetryAfter, or fallback when it named none. api returns its
// error classified (Classify, RateLimited); Call returns the last one.
func (g *Gate) Call(ctx context.Context, maxAttempts int, fallback time.Duration, api func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		if err := g.Wait(ctx); err != nil {
			return Classify(KindTransient, err)
		}
		err := api(ctx)
		var kitErr *Error
		if err == nil || !errors.As(err, &kitErr) || kitErr.Kind != KindRateLimited {
			return err
		}
		wait := kitErr.RetryAfter
		if wait <= 0 {
			wait = fallback
		}
		g.Defer(g.clock.Now().Add(wait))
		if attempt >= maxAttempts {
			return err
		}
	}
}
