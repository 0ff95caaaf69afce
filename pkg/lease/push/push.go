// Package push tells the instances that check lease credentials what the
// leader learned of their leases: a lease that ended before its expiry
// (released, revoked, superseded: store.Config.OnLeaseEnded) and a lease
// whose end moved (a renewal, a session's join), so that the instance
// refuses the ended lease's credentials and closes its connections, and
// keeps a renewed lease's tunnels open past the end its first credential
// named (docs/decisions/0400-a-lease-is-a-key.md).
//
// Updates are batched per instance address and sent every Interval as one
// signed POST (pkg/leasecred) to the address the probes use: a cloud VM
// outside the cluster is reached wherever the operator's probes reach it.
// A failed push is retried at the next interval until the updates it
// carries no longer matter (the lease's credentials have all expired). An
// instance cut off from the operator keeps honouring credentials until the
// end they name, never beyond.
//
// It runs on every replica (Run): the ends come only from the replica whose
// store decides (the store tells OnLeaseEnded there alone), the signings
// from whichever replica served the call, which with a replicated store
// (--lease-replication=raft) may be a follower that forwarded it to the
// leader's store. It does no work on the store's lock (Ended only
// enqueues) and decides nothing about leases.
package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Defaults of Config.
const (
	DefaultInterval   = 500 * time.Millisecond
	DefaultTimeout    = 2 * time.Second
	DefaultMaxPending = 1 << 20
	// DefaultParallel bounds the pushes in flight at once.
	DefaultParallel = 32
	// targetIdle is how long an unused target is remembered, for the end of
	// a lease on a Proxy since deleted: the longest TTL and a margin.
	targetIdle = 15 * time.Minute
)

// Bound is the promise the docs make from the defaults: an instance the
// operator reaches refuses an ended lease's credentials, and has closed its
// connections, within it (an interval to the next flush, a push that
// times out, the retry at the flush after).
const Bound = 5 * time.Second

// Target is where a proxy's instance listens (its status address, as the
// probes reach it) and its lease keys, the first signing.
type Target struct {
	Addr string
	Keys []leasecred.Key
}

// Resolver finds a proxy's target: false when its instance checks no lease
// credentials (not LeaseBound), or the proxy is gone or another one.
type Resolver func(proxy store.ObjectName, uid types.UID) (Target, bool)

// Metrics counts what the pusher does.
type Metrics interface {
	// ObservePush counts one push by result: ok, refused (the instance
	// refused it: another key, no keys), failed (unreachable, timed out;
	// retried).
	ObservePush(result string)
	// SetPushPending is the updates waiting to be sent.
	SetPushPending(n int)
	// PushUpdatesDropped counts updates given up: past their use, or
	// beyond MaxPending.
	PushUpdatesDropped(n int)
}

// Push results, the label values of Metrics.ObservePush.
const (
	ResultOK      = "ok"
	ResultRefused = "refused"
	ResultFailed  = "failed"
)

// Results lists the push results.
var Results = []string{ResultOK, ResultRefused, ResultFailed}

// Config configures a Pusher.
type Config struct {
	// Resolve finds an instance for an update whose proxy the pusher has not
	// met (a lease a previous leader granted). Required.
	Resolve Resolver
	// Interval is how often pending updates are sent. Default DefaultInterval.
	Interval time.Duration
	// Timeout bounds one push. Default DefaultTimeout.
	Timeout time.Duration
	// MaxPending bounds the updates waiting. Default DefaultMaxPending.
	MaxPending int
	// Parallel bounds the pushes in flight. Default DefaultParallel.
	Parallel int
	// HTTP sends the pushes. Default: a client that never uses a proxy.
	HTTP    *http.Client
	Clock   clock.WithTicker
	Metrics Metrics
}

// proxyID is a proxy as leases name it: a recreated Proxy of the same name
// is another.
type proxyID struct {
	key store.ObjectName
	uid types.UID
}

type knownTarget struct {
	Target
	lastUsed time.Time
}

// batch is the updates for one instance: one push.
type batch struct {
	target  Target
	updates map[leasecred.Ref]leasecred.Update
}

// Pusher batches and sends lease updates to instances. Create it with New.
type Pusher struct {
	cfg Config

	mu sync.Mutex
	// pending are the updates not yet sent, by proxy, and how many.
	pending  map[proxyID]map[leasecred.Ref]leasecred.Update
	nPending int
	// targets are the instances met in grants and renewals, by proxy.
	targets map[proxyID]*knownTarget
	// retry are the batches to send again (failed, or waiting behind a
	// push on its way), by address; their updates count in nPending.
	retry map[string]*batch
	// inFlight are the addresses a push is on its way to.
	inFlight map[string]bool
}

// New checks cfg and applies its defaults; it starts nothing (Run does).
func New(cfg Config) (*Pusher, error) {
	if cfg.Resolve == nil {
		return nil, errors.New("push: a Resolver is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.MaxPending < 0 || cfg.Parallel < 0 {
		return nil, errors.New("push: negative Interval, Timeout, MaxPending or Parallel")
	}
	if cfg.HTTP == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // straight to the instance, never through $HTTPS_PROXY
		t.MaxIdleConnsPerHost = 1
		cfg.HTTP = &http.Client{Transport: t}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return &Pusher{
		cfg:      cfg,
		pending:  map[proxyID]map[leasecred.Ref]leasecred.Update{},
		targets:  map[proxyID]*knownTarget{},
		retry:    map[string]*batch{},
		inFlight: map[string]bool{},
	}, nil
}

// Ended is store.Config.OnLeaseEnded: the lease's instance is to refuse its
// credentials and close its connections. It only enqueues.
func (p *Pusher) Ended(e store.EndedLease) {
	p.enqueue(proxyID{e.Proxy, e.ProxyUID}, leasecred.Update{Ref: Ref(e.Ref), Until: e.ExpiresAt, Ended: true})
}

// Signed tells the pusher the lease API signed credentials of lease l for
// the instance at t: t is remembered for the lease's later end (the Proxy
// may be gone by then), and when l's end moved since its grant (a renewal,
// a session's join) the instance is told, so that the tunnels opened under
// its earlier credentials stay open.
func (p *Pusher) Signed(l store.Lease, t Target) {
	id := proxyID{l.Proxy.Key, l.Proxy.UID}
	p.mu.Lock()
	p.targets[id] = &knownTarget{Target: t, lastUsed: p.cfg.Clock.Now()}
	p.mu.Unlock()
	if l.ExpiresAt.Add(-l.TTL).Equal(l.GrantedAt) {
		return // a fresh grant: its credentials name its whole end
	}
	p.enqueue(id, leasecred.Update{Ref: Ref(l.Ref), Until: l.ExpiresAt})
}

// Ref is a store.LeaseRef as credentials carry it.
func Ref(r store.LeaseRef) leasecred.Ref { return leasecred.Ref{Epoch: r.Epoch, Serial: r.Serial} }

func (p *Pusher) enqueue(id proxyID, u leasecred.Update) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mergeLocked(id, u)
}

// mergeLocked adds u to the pending updates: an end wins over a renewal,
// and the later Until over the earlier.
func (p *Pusher) mergeLocked(id proxyID, u leasecred.Update) {
	byRef := p.pending[id]
	if byRef == nil {
		byRef = map[leasecred.Ref]leasecred.Update{}
		p.pending[id] = byRef
	}
	old, had := byRef[u.Ref]
	switch {
	case !had && p.nPending >= p.cfg.MaxPending:
		p.cfg.Metrics.PushUpdatesDropped(1)
		return
	case !had:
		p.nPending++
	default:
		u.Ended = u.Ended || old.Ended
		if old.Until.After(u.Until) {
			u.Until = old.Until
		}
	}
	byRef[u.Ref] = u
	p.cfg.Metrics.SetPushPending(p.nPending)
}

// Run sends the pending updates every Interval until ctx ends; updates
// still pending then are dropped (a new leader learns its leases anew).
func (p *Pusher) Run(ctx context.Context) error {
	t := p.cfg.Clock.NewTicker(p.cfg.Interval)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, p.cfg.Parallel)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		for _, b := range p.take(ctx) {
			select {
			case slots <- struct{}{}:
			default:
				p.putBack(b) // every slot busy: at the next interval
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				p.send(ctx, b)
			}()
		}
	}
}

// take empties the pending updates into batches, one per instance address
// not already being pushed to, dropping updates past their use and those
// of proxies whose instance checks no lease credentials.
func (p *Pusher) take(ctx context.Context) []*batch {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	pending, batches := p.pending, p.retry
	p.pending, p.retry, p.nPending = map[proxyID]map[leasecred.Ref]leasecred.Update{}, map[string]*batch{}, 0
	for id, t := range p.targets {
		if now.Sub(t.lastUsed) > targetIdle {
			delete(p.targets, id)
		}
	}
	p.mu.Unlock()

	dropped := 0
	for id, byRef := range pending {
		t, ok := p.target(id, now)
		if !ok {
			dropped += len(byRef)
			continue
		}
		b := batches[t.Addr]
		if b == nil {
			b = &batch{target: t, updates: map[leasecred.Ref]leasecred.Update{}}
			batches[t.Addr] = b
		}
		for _, u := range byRef {
			b.add(u)
		}
	}
	out := make([]*batch, 0, len(batches))
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, b := range batches {
		for ref, u := range b.updates {
			if !now.Before(u.Until) {
				delete(b.updates, ref) // every credential of it has expired
				dropped++
			}
		}
		switch {
		case len(b.updates) == 0:
		case p.inFlight[addr]:
			p.retryLocked(b) // after the push on its way
		default:
			p.inFlight[addr] = true
			out = append(out, b)
		}
	}
	if dropped > 0 {
		p.cfg.Metrics.PushUpdatesDropped(dropped)
		klog.FromContext(ctx).V(4).Info("Dropped lease updates no instance needs", "updates", dropped)
	}
	p.cfg.Metrics.SetPushPending(p.nPending)
	return out
}

// add merges u into the batch: an end wins over a renewal, the later
// Until over the earlier.
func (b *batch) add(u leasecred.Update) {
	if old, had := b.updates[u.Ref]; had {
		u.Ended = u.Ended || old.Ended
		if old.Until.After(u.Until) {
			u.Until = old.Until
		}
	}
	b.updates[u.Ref] = u
}

// target is the proxy's instance: the one met in a grant or renewal, else
// what the resolver finds now.
func (p *Pusher) target(id proxyID, now time.Time) (Target, bool) {
	p.mu.Lock()
	t := p.targets[id]
	p.mu.Unlock()
	if t != nil {
		return t.Target, true
	}
	found, ok := p.cfg.Resolve(id.key, id.uid)
	if !ok || len(found.Keys) == 0 {
		return Target{}, false
	}
	p.mu.Lock()
	p.targets[id] = &knownTarget{Target: found, lastUsed: now}
	p.mu.Unlock()
	return found, true
}

// putBack keeps a batch whose push failed (or found no slot) for the next
// interval.
func (p *Pusher) putBack(b *batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inFlight, b.target.Addr)
	p.retryLocked(b)
}

func (p *Pusher) retryLocked(b *batch) {
	r := p.retry[b.target.Addr]
	if r == nil {
		r = &batch{target: b.target, updates: map[leasecred.Ref]leasecred.Update{}}
		p.retry[b.target.Addr] = r
	}
	for _, u := range b.updates {
		if _, had := r.updates[u.Ref]; !had {
			p.nPending++
		}
		r.add(u)
	}
}

// send pushes one batch; a failure puts it back for the next interval.
func (p *Pusher) send(ctx context.Context, b *batch) {
	logger := klog.FromContext(ctx)
	updates := make([]leasecred.Update, 0, len(b.updates))
	for _, u := range b.updates {
		updates = append(updates, u)
	}
	var err error
	for start := 0; start < len(updates) && err == nil; start += leasecred.MaxPushUpdates {
		err = p.post(ctx, b.target, updates[start:min(len(updates), start+leasecred.MaxPushUpdates)])
	}
	var refused *refusedError
	switch {
	case err == nil:
		p.cfg.Metrics.ObservePush(ResultOK)
		p.mu.Lock()
		delete(p.inFlight, b.target.Addr)
		p.mu.Unlock()
		logger.V(4).Info("Pushed lease updates", "instance", b.target.Addr, "updates", len(updates))
	case errors.As(err, &refused):
		// Retrying changes nothing: the instance has another key, or none.
		p.cfg.Metrics.ObservePush(ResultRefused)
		p.cfg.Metrics.PushUpdatesDropped(len(updates))
		p.mu.Lock()
		delete(p.inFlight, b.target.Addr)
		p.mu.Unlock()
		logger.Error(err, "An instance refused the lease updates pushed to it; its leases' credentials end only at their expiry", "instance", b.target.Addr, "updates", len(updates))
	default:
		p.cfg.Metrics.ObservePush(ResultFailed)
		p.putBack(b)
		logger.V(2).Info("Pushing lease updates failed; retrying", "instance", b.target.Addr, "updates", len(updates), "err", err.Error())
	}
}

// refusedError is an instance's refusal of a push.
type refusedError struct {
	status  int
	message string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the instance answered %d: %s", e.status, e.message)
}

func (p *Pusher) post(ctx context.Context, t Target, updates []leasecred.Update) error {
	body, auth := leasecred.EncodePush(t.Keys[0], updates)
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+t.Addr+leasecred.PushPath, bytes.NewReader(body))
	if err != nil {
		return &refusedError{message: err.Error()}
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound:
		return &refusedError{status: resp.StatusCode, message: string(bytes.TrimSpace(answer))}
	}
	return fmt.Errorf("the instance answered %d: %s", resp.StatusCode, bytes.TrimSpace(answer))
}

type noMetrics struct{}

func (noMetrics) ObservePush(string)     {}
func (noMetrics) SetPushPending(int)     {}
func (noMetrics) PushUpdatesDropped(int) {}
