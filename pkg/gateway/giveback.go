package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A rotating tunnel takes a lease and gives it back: two lease API round
// trips, about 30% of a replica's CPU in a profile of the tier. A lease
// that ends well (outcome ok or error) is therefore parked for up to
// Config.GiveBackWait, and the next acquire of the same caller carries it
// (the acquire's release member): under load every release rides on an
// acquire that is made anyway. A parked lease nobody's acquire took is
// released on its own when its wait is over. A ban is never parked: the
// retry's acquire must not be offered the banned proxy for the domain.
// Record 0202.

// DefaultGiveBackWait is --gateway-give-back-wait's default: long enough
// for a busy caller's next acquire to come, short against a lease's
// seconds.
const DefaultGiveBackWait = 10 * time.Millisecond

// Release is a lease the gateway gives back: with its own call, or with
// the next acquire of the same caller.
type Release struct {
	ID      string
	Outcome store.Outcome
	// Domain is a ban's domain ("": the lease's).
	Domain string
	// Transferred is the bytes moved since the last report.
	Transferred int64
}

// parked is a release waiting for an acquire of its caller.
type parked struct {
	user auth.User
	Release
	at time.Time
}

// givingBack holds the parked releases per caller identity.
type givingBack struct {
	mu sync.Mutex
	// byCaller is bounded by the rotating leases held: each parked lease
	// was one, and at most GiveBackWait old.
	byCaller map[string][]parked
}

// park keeps r for the next acquire of user.
func (g *Gateway) park(user auth.User, r Release) {
	p := parked{user: user, Release: r, at: g.cfg.Clock.Now()}
	g.giving.mu.Lock()
	defer g.giving.mu.Unlock()
	if g.giving.byCaller == nil {
		g.giving.byCaller = map[string][]parked{}
	}
	id := user.Identity()
	g.giving.byCaller[id] = append(g.giving.byCaller[id], p)
}

// unpark takes the oldest parked release of user, if any.
func (g *Gateway) unpark(user auth.User) *parked {
	g.giving.mu.Lock()
	defer g.giving.mu.Unlock()
	id := user.Identity()
	queue := g.giving.byCaller[id]
	if len(queue) == 0 {
		return nil
	}
	p := queue[0]
	if len(queue) == 1 {
		delete(g.giving.byCaller, id)
	} else {
		g.giving.byCaller[id] = queue[1:]
	}
	return &p
}

// repark puts back a release an acquire could not be shown to have made
// (it failed): released twice, a lease answers 404 the second time and
// counts once.
func (g *Gateway) repark(p *parked) {
	g.giving.mu.Lock()
	defer g.giving.mu.Unlock()
	if g.giving.byCaller == nil {
		g.giving.byCaller = map[string][]parked{}
	}
	id := p.user.Identity()
	g.giving.byCaller[id] = append([]parked{*p}, g.giving.byCaller[id]...)
}

// releaseParked releases, each with its own call, the parked leases older
// than before (every one, for the zero time).
func (g *Gateway) releaseParked(ctx context.Context, before time.Time, logger klog.Logger) {
	var due []parked
	g.giving.mu.Lock()
	for id, queue := range g.giving.byCaller {
		n := 0
		for n < len(queue) && (before.IsZero() || queue[n].at.Before(before)) {
			n++
		}
		due = append(due, queue[:n]...)
		if n == len(queue) {
			delete(g.giving.byCaller, id)
		} else {
			g.giving.byCaller[id] = queue[n:]
		}
	}
	g.giving.mu.Unlock()
	for _, p := range due {
		err := g.cfg.Leases.Release(ctx, p.user, p.ID, p.Outcome, p.Domain, p.Transferred)
		if err != nil && !leaseGone(err) && !errors.Is(err, store.ErrNotLeader) {
			logger.Error(err, "Releasing a parked gateway lease", "outcome", p.Outcome)
		}
	}
}

// runGiveBack releases the parked leases no acquire took within
// GiveBackWait, until ctx ends.
func (g *Gateway) runGiveBack(ctx context.Context) {
	if g.cfg.GiveBackWait <= 0 {
		return
	}
	logger := klog.FromContext(ctx)
	t := g.cfg.Clock.NewTicker(g.cfg.GiveBackWait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			g.releaseParked(ctx, g.cfg.Clock.Now().Add(-g.cfg.GiveBackWait), logger)
		}
	}
}
