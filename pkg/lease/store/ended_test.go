package store

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// endedRecorder is a Config.OnLeaseEnded that records what it is told,
// and whether it was told while the store it watches held its lock.
type endedRecorder struct {
	mu     sync.Mutex
	ended  []EndedLease
	store  *Store
	locked int
}

func (r *endedRecorder) record(e EndedLease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, e)
	if r.store != nil {
		if !r.store.mu.TryLock() {
			r.locked++
			return
		}
		r.store.mu.Unlock()
	}
}

func (r *endedRecorder) take() []EndedLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ended
	r.ended = nil
	return out
}

// TestOnLeaseEndedTellsEveryEarlyEnd: releases, revocations and
// supersessions are told, with the lease's ref and expiry; an expiry is not
// (the lease's credentials name their end).
func TestOnLeaseEndedTellsEveryEarlyEnd(t *testing.T) {
	for name, tc := range map[string]struct {
		// end ends a lease of s, given l, the first one granted: it returns
		// the lease that ended and how.
		end func(t *testing.T, s *Store, l Lease) (Lease, string)
	}{
		"released ok": {end: func(t *testing.T, s *Store, l Lease) (Lease, string) {
			release(t, s, l)
			return l, EndReleasedOK
		}},
		"released banned": {end: func(t *testing.T, s *Store, l Lease) (Lease, string) {
			if err := s.ReleaseAs("", l.ID, OutcomeBanned, "example.com", Report{}); err != nil {
				t.Fatal(err)
			}
			return l, EndReleasedBanned
		}},
		"revoked: the proxy left Ready": {end: func(t *testing.T, s *Store, l Lease) (Lease, string) {
			s.Upsert(newProxy("p1", notReady()))
			return l, EndRevoked
		}},
		"revoked: the proxy was deleted": {end: func(t *testing.T, s *Store, l Lease) (Lease, string) {
			s.Remove(ObjectName{testNamespace, "p1"})
			return l, EndRevoked
		}},
		"revoked: the proxy's maxLeases dropped": {end: func(t *testing.T, s *Store, _ Lease) (Lease, string) {
			second := acquire(t, s, AcquireRequest{Holder: "b"}) // slot 1, the one dropped
			s.Upsert(newProxy("p1", withMaxLeases(1)))
			return second, EndRevoked
		}},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &endedRecorder{}
			s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1", withMaxLeases(2))},
				withStoreConfig(func(c *Config) { c.OnLeaseEnded = rec.record }))
			l := acquire(t, s, AcquireRequest{Holder: "a", Domain: "example.com"})
			ended, how := tc.end(t, s, l)
			want := []EndedLease{{Proxy: ended.Proxy.Key, ProxyUID: ended.Proxy.UID, Ref: ended.Ref, ExpiresAt: ended.ExpiresAt, End: how}}
			if diff := cmp.Diff(want, rec.take()); diff != "" {
				t.Errorf("ended (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnLeaseEndedIsNotToldOfExpiries(t *testing.T) {
	rec := &endedRecorder{}
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")},
		withStoreConfig(func(c *Config) { c.OnLeaseEnded = rec.record }))
	l := acquire(t, s, AcquireRequest{Holder: "a"})
	clk.Step(l.TTL + time.Second)
	s.Advance()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("an expiry told %+v, want nothing", got)
	}
	// A release after the expiry ends nothing.
	_ = s.ReleaseAs("", l.ID, OutcomeOK, "", Report{})
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a release after the expiry told %+v, want nothing", got)
	}
}

// TestOnLeaseEndedAcrossALeaderChange: a lease the new leader re-learns and
// then releases, one it never met and releases, and one it supersedes are
// all told on the new leader; the ref is the one the old leader granted.
func TestOnLeaseEndedAcrossALeaderChange(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"), newProxy("p2"))
	rec := &endedRecorder{}
	tl.new.cfg.OnLeaseEnded = rec.record
	a := acquire(t, tl.old, AcquireRequest{Holder: "a"})
	b := acquire(t, tl.old, AcquireRequest{Holder: "b"})
	tl.lead(DefaultTTL)

	renewed, err := tl.new.RenewAs("", a.ID, 0, Report{})
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Ref != a.Ref {
		t.Errorf("renewed ref %v, want the grant's %v", renewed.Ref, a.Ref)
	}
	if err := tl.new.ReleaseAs("", renewed.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	if err := tl.new.ReleaseAs("", b.ID, OutcomeOK, "", Report{}); err != nil { // never renewed here
		t.Fatal(err)
	}
	want := []EndedLease{
		{Proxy: a.Proxy.Key, ProxyUID: a.Proxy.UID, Ref: a.Ref, ExpiresAt: renewed.ExpiresAt, End: EndReleasedOK},
		{Proxy: b.Proxy.Key, ProxyUID: b.Proxy.UID, Ref: b.Ref, ExpiresAt: b.ExpiresAt, End: EndReleasedOK},
	}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("ended (-want +got):\n%s", diff)
	}
}

// TestOnLeaseEndedOnlyOnTheStoreThatDecides: a follower applying the
// leader's effects (a release, a revocation) tells nothing, so each end is
// pushed once, by the leader; the leader tells it with its lock released.
func TestOnLeaseEndedOnlyOnTheStoreThatDecides(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	onFollower := &endedRecorder{}
	follower, _, _ := newTestStore(t, nil, withStoreConfig(func(c *Config) {
		c.Follower, c.Clock, c.OnLeaseEnded = true, clk, onFollower.record
	}))
	onLeader := &endedRecorder{}
	leader, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1"), newProxy("p2")}, withStoreConfig(func(c *Config) {
		c.Journal, c.Clock, c.OnLeaseEnded = &followerJournal{follower: follower}, clk, onLeader.record
	}))
	onLeader.store = leader
	follower.Apply(ProxyPut{info: newProxy("p1")}, ProxyPut{info: newProxy("p2")}, TermStart{epoch: leader.st.term.epoch})

	a := acquire(t, leader, AcquireRequest{Holder: "a"})
	b := acquire(t, leader, AcquireRequest{Holder: "b"})
	release(t, leader, a)
	leader.Remove(b.Proxy.Key)

	want := []EndedLease{
		{Proxy: a.Proxy.Key, ProxyUID: a.Proxy.UID, Ref: a.Ref, ExpiresAt: a.ExpiresAt, End: EndReleasedOK},
		{Proxy: b.Proxy.Key, ProxyUID: b.Proxy.UID, Ref: b.Ref, ExpiresAt: b.ExpiresAt, End: EndRevoked},
	}
	if diff := cmp.Diff(want, onLeader.take()); diff != "" {
		t.Errorf("the leader told (-want +got):\n%s", diff)
	}
	if onLeader.locked != 0 {
		t.Errorf("%d ends told while the store held its lock, want none", onLeader.locked)
	}
	if got := onFollower.take(); len(got) != 0 {
		t.Errorf("the follower told %+v, want nothing", got)
	}
}
