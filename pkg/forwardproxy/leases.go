package forwardproxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Lease credentials (Config.LeaseKeys, docs/decisions/0400-a-lease-is-a-key.md):
// the book of the leases this proxy has seen, what it was told of them,
// and the client connections open under each, closed when the lease ends.
//
// A lease's entry lives from the first request of one of its credentials
// (or a pushed end) until its end: until is the latest end learned (a
// credential naming a later one, a pushed renewal); an ended lease (a
// pushed release or revocation) refuses every credential of it until the
// latest end any of them names (forgetAt), and its connections are closed
// at once. One timer per entry closes its connections at until and drops
// the entry at forgetAt.

// maxLeaseEntries bounds the book: entries come only from credentials and
// pushes the operator signed, so this is a guard against a bug, not a limit
// a crawler can reach (a ranged instance's thousands of sessions are far
// below it).
const maxLeaseEntries = 1 << 18

// leaseBook is the leases of a Server with LeaseKeys.
type leaseBook struct {
	metrics *serverMetrics

	mu      sync.Mutex
	entries map[leasecred.Ref]*leaseEntry
}

// leaseEntry is one lease: what the proxy knows of it and its connections.
type leaseEntry struct {
	ref      leasecred.Ref
	until    time.Time
	forgetAt time.Time
	ended    bool
	conns    map[*trackedConn]struct{}
	timer    *time.Timer
}

func newLeaseBook(m *serverMetrics) *leaseBook {
	return &leaseBook{metrics: m, entries: map[leasecred.Ref]*leaseEntry{}}
}

// admitReason is why admit refused a credential ("" when it did not).
type admitReason string

const (
	refusedExpired admitReason = "expired"
	refusedEnded   admitReason = "ended"
	refusedFull    admitReason = "full"
)

// admit takes a verified credential's claims at now: its lease's entry
// (nil for the zero ref, the operator's own short credential) and "", or
// why it is refused.
func (b *leaseBook) admit(c leasecred.Claims, now time.Time) (*leaseEntry, admitReason) {
	if !now.Before(c.End) {
		return nil, refusedExpired
	}
	if c.Ref.IsZero() {
		return nil, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[c.Ref]
	switch {
	case e == nil && len(b.entries) >= maxLeaseEntries:
		return nil, refusedFull
	case e == nil:
		e = b.newEntryLocked(c.Ref, c.End, now)
	case e.ended:
		return nil, refusedEnded
	default:
		e.extendLocked(c.End)
	}
	return e, ""
}

func (b *leaseBook) newEntryLocked(ref leasecred.Ref, until, now time.Time) *leaseEntry {
	e := &leaseEntry{ref: ref, until: until, forgetAt: until}
	e.timer = time.AfterFunc(until.Sub(now), func() { b.fire(e) })
	b.entries[ref] = e
	b.metrics.leases.Set(float64(len(b.entries)))
	return e
}

// extendLocked raises the lease's known end; the timer, when it fires
// before it, looks again.
func (e *leaseEntry) extendLocked(until time.Time) {
	if until.After(e.until) {
		e.until = until
	}
	if e.until.After(e.forgetAt) {
		e.forgetAt = e.until
	}
}

// attach records that c is serving e's lease now (a tunnel, or a kept-alive
// connection whose latest request was under it), so that it is closed
// when the lease ends.
func (b *leaseBook) attach(e *leaseEntry, c *trackedConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.lease == e {
		return
	}
	if c.lease != nil {
		delete(c.lease.conns, c)
	}
	if e.ended {
		// Ended between admit and here: close it as the end did the rest.
		go c.closeForLease(b.metrics)
		return
	}
	if e.conns == nil {
		e.conns = map[*trackedConn]struct{}{}
	}
	e.conns[c] = struct{}{}
	c.lease = e
}

// detach forgets c, which is closing.
func (b *leaseBook) detach(c *trackedConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.lease != nil {
		delete(c.lease.conns, c)
		c.lease = nil
	}
}

// takeConnsLocked empties e's connections and returns them, to close
// outside the lock (closing detaches, which takes it).
func (e *leaseEntry) takeConnsLocked() []*trackedConn {
	conns := make([]*trackedConn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
		c.lease = nil
	}
	e.conns = nil
	return conns
}

// fire is e's timer: at until its connections go, at forgetAt the entry.
func (b *leaseBook) fire(e *leaseEntry) {
	now := time.Now()
	b.mu.Lock()
	var closing []*trackedConn
	switch {
	case !e.ended && now.Before(e.until):
		e.timer.Reset(e.until.Sub(now)) // extended meanwhile
	default:
		closing = e.takeConnsLocked()
		if now.Before(e.forgetAt) {
			e.timer.Reset(e.forgetAt.Sub(now))
		} else if b.entries[e.ref] == e {
			delete(b.entries, e.ref)
			b.metrics.leases.Set(float64(len(b.entries)))
		}
	}
	b.mu.Unlock()
	for _, c := range closing {
		c.closeForLease(b.metrics)
	}
}

// apply takes what a push says: a renewal raises a lease's end, an end
// refuses its credentials from now on and closes its connections.
func (b *leaseBook) apply(updates []leasecred.Update, now time.Time) {
	var closing []*trackedConn
	b.mu.Lock()
	for _, u := range updates {
		e := b.entries[u.Ref]
		switch {
		case e == nil && !u.Ended:
			// A renewal of a lease nobody used here: its credentials
			// carry their own end.
			continue
		case e == nil && !now.Before(u.Until):
			continue // nothing of it can be admitted any more
		case e == nil && len(b.entries) >= maxLeaseEntries:
			b.metrics.pushUpdatesDropped.Inc()
			continue
		case e == nil:
			e = b.newEntryLocked(u.Ref, u.Until, now)
		}
		if !u.Ended {
			if !e.ended {
				e.extendLocked(u.Until)
			}
			continue
		}
		if u.Until.After(e.forgetAt) {
			e.forgetAt = u.Until
		}
		if !e.ended {
			e.ended = true
			closing = append(closing, e.takeConnsLocked()...)
			e.timer.Reset(max(0, e.forgetAt.Sub(now)))
		}
	}
	b.mu.Unlock()
	for _, c := range closing {
		c.closeForLease(b.metrics)
	}
}

// closeForLease closes a connection whose lease ended, counted once.
func (c *trackedConn) closeForLease(m *serverMetrics) {
	c.leaseClose.Do(func() {
		m.leaseConnsClosed.Inc()
		_ = c.Close()
	})
}

// LeaseKeysHeader names, in the answer to the operator's own credentials
// (the opening of a tunnel, a forwarded response), the IDs of the proxy's
// lease keys (leasecred.KeysHeader).
const LeaseKeysHeader = leasecred.KeysHeader

func leaseKeyIDs(keys []leasecred.Key) string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	return strings.Join(ids, ",")
}

// servePush takes a push of lease updates (leasecred.PushPath): signed with
// one of the lease keys, applied at once, answered 204. A proxy without
// lease keys answers 404, so that the operator learns it checks none.
func (s *Server) servePush(w http.ResponseWriter, r *http.Request) {
	if s.leases == nil {
		http.Error(w, "404 this proxy checks no lease credentials (no --lease-key-file)", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, leasecred.MaxPushBytes))
	if err != nil {
		s.metrics.pushes.WithLabelValues("refused").Inc()
		http.Error(w, "400 cannot read the push: "+err.Error(), http.StatusBadRequest)
		return
	}
	updates, err := leasecred.VerifyPush(s.cfg.LeaseKeys, body, r.Header.Get("Authorization"))
	if err != nil {
		s.metrics.pushes.WithLabelValues("refused").Inc()
		s.log.V(2).Info("Refusing a push of lease updates", "client", r.RemoteAddr, "err", err)
		http.Error(w, "403 "+err.Error(), http.StatusForbidden)
		return
	}
	s.leases.apply(updates, time.Now())
	s.metrics.pushes.WithLabelValues("ok").Inc()
	s.log.V(3).Info("Took a push of lease updates", "client", r.RemoteAddr, "updates", len(updates))
	w.WriteHeader(http.StatusNoContent)
}
