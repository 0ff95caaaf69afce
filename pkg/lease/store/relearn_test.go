package store

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// twoLeaders is an old leader with leases and a new leader on the same
// clock and key, fed the same proxies, not leading yet.
type twoLeaders struct {
	clk      *clocktesting.FakeClock
	old, new *Store
	proxies  []ProxyInfo
	victimID string
}

func newTwoLeaders(t *testing.T, proxies ...ProxyInfo) *twoLeaders {
	t.Helper()
	old, clk, _ := newTestStore(t, proxies)
	next, err := New(Config{Clock: clk, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		next.Upsert(p)
	}
	// Whatever a test did across the leader change (re-learning,
	// superseding, tombstones, an abdication), both stores' structures
	// still agree (the check of the property test).
	t.Cleanup(func() {
		for name, s := range map[string]*Store{"old": old, "new": next} {
			if err := s.checkConsistency(); err != nil {
				t.Errorf("the %s leader's structures: %v", name, err)
			}
		}
	})
	return &twoLeaders{clk: clk, old: old, new: next, proxies: proxies}
}

// lead makes the new replica lead with a recovery, a moment after the old
// one's term began (term epochs come from the clock).
func (tl *twoLeaders) lead(recovery time.Duration) {
	tl.clk.Step(time.Millisecond)
	tl.new.Lead(tl.clk.Now().Add(recovery), time.Time{})
}

// upsert changes a proxy on both replicas, as the informer would.
func (tl *twoLeaders) upsert(p ProxyInfo) {
	tl.old.Upsert(p)
	tl.new.Upsert(p)
}

func TestNewLeaderRefusesGrantsWhileRecovering(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"), newProxy("p2"))
	held := acquire(t, tl.old, AcquireRequest{Holder: "a"})
	tl.lead(DefaultTTL)

	_, err := tl.new.Acquire(t.Context(), AcquireRequest{Holder: "b"})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, ErrRecovering) || unavailable.RetryAfter != DefaultTTL {
		t.Fatalf("Acquire while recovering: err = %v, want ErrRecovering with RetryAfter %v", err, DefaultTTL)
	}
	// The old leader's lease renews on the new leader, on the same proxy and slot.
	tl.clk.Step(10 * time.Second)
	renewed, err := tl.new.RenewAs("", held.ID, 0, Report{})
	if err != nil {
		t.Fatalf("Renew on the new leader: %v", err)
	}
	if renewed.Proxy.Key != held.Proxy.Key || renewed.Slot != held.Slot || renewed.Holder != "a" || !renewed.GrantedAt.Equal(held.GrantedAt) {
		t.Errorf("re-learned lease %+v does not match the granted %+v", renewed, held)
	}
	if want := tl.clk.Now().Add(DefaultTTL); !renewed.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
	}
	// Once recovered it grants again, around the re-learned lease.
	tl.clk.Step(DefaultTTL - 10*time.Second)
	got := acquire(t, tl.new, AcquireRequest{Holder: "b"})
	if got.Proxy.Key == held.Proxy.Key {
		t.Errorf("granted %s, which the re-learned lease holds", got.Proxy.Key)
	}
	if _, err := tl.new.Acquire(t.Context(), AcquireRequest{Holder: "c"}); !errors.Is(err, ErrNoneFree) {
		t.Errorf("third acquire: err = %v, want ErrNoneFree", err)
	}
	// Both the first and the latest ID of the re-learned lease name it.
	if _, err := tl.new.RenewAs("", renewed.ID, 0, Report{}); err != nil {
		t.Errorf("Renew with the new ID: %v", err)
	}
	if _, err := tl.new.RenewAs("", held.ID, 0, Report{}); err != nil {
		t.Errorf("Renew with the first ID: %v", err)
	}
}

func TestRelearning(t *testing.T) {
	recovery := 2 * DefaultTTL
	for name, tc := range map[string]struct {
		// before runs on both replicas' proxies between the old grant and the renewal.
		before  func(tl *twoLeaders)
		wantErr error
	}{
		"a live lease":           {},
		"its proxy was deleted":  {before: func(tl *twoLeaders) { tl.new.Remove(tl.proxies[0].Key) }, wantErr: ErrRevoked},
		"its proxy is not Ready": {before: func(tl *twoLeaders) { tl.new.Upsert(newProxy("p1", withMaxLeases(2), notReady())) }, wantErr: ErrRevoked},
		"its proxy was not Ready in between": {
			before:  func(tl *twoLeaders) { tl.new.Upsert(newProxy("p1", withMaxLeases(2), readySince(t0.Add(time.Second)))) },
			wantErr: ErrRevoked,
		},
		"its proxy was recreated (UID)": {before: func(tl *twoLeaders) { tl.new.Upsert(newProxy("p1", withMaxLeases(2), withUID("other"))) }, wantErr: ErrRevoked},
		"its proxy was replaced (URL)": {
			before:  func(tl *twoLeaders) { tl.new.Upsert(newProxy("p1", withMaxLeases(2), withURL("http://127.0.0.9:1"))) },
			wantErr: ErrRevoked,
		},
		"its slot is beyond maxLeases now": {
			before: func(tl *twoLeaders) {
				tl.new.Upsert(newProxy("p1", withMaxLeases(1)))
			},
			wantErr: ErrRevoked,
		},
		"it expired":            {before: func(tl *twoLeaders) { tl.clk.Step(DefaultTTL) }, wantErr: ErrUnknownLease},
		"no recovery":           {before: func(tl *twoLeaders) { tl.new.Lead(time.Time{}, time.Time{}) }, wantErr: ErrUnknownLease},
		"it was released first": {before: func(tl *twoLeaders) { _ = tl.new.ReleaseAs("", tl.victim(), OutcomeOK, "", Report{}) }, wantErr: ErrUnknownLease},
	} {
		t.Run(name, func(t *testing.T) {
			tl := newTwoLeaders(t, newProxy("p1", withMaxLeases(2)))
			acquire(t, tl.old, AcquireRequest{Holder: "first"})
			second := acquire(t, tl.old, AcquireRequest{Holder: "second", TTL: 30 * time.Second}) // slot 1
			tl.victimID = second.ID
			tl.lead(recovery)
			if tc.before != nil {
				tc.before(tl)
			}
			_, err := tl.new.RenewAs("", second.ID, DefaultTTL, Report{})
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("Renew: err = %v, want %v", err, tc.wantErr)
			}
			// The answer is stable.
			if _, again := tl.new.RenewAs("", second.ID, DefaultTTL, Report{}); !errors.Is(again, tc.wantErr) || (again != nil) != (tc.wantErr != nil) {
				t.Errorf("second Renew: err = %v, want %v", again, tc.wantErr)
			}
		})
	}
}

// victimID is the lease a TestRelearning case is about.
func (tl *twoLeaders) victim() string { return tl.victimID }

func TestLaterGrantSupersedes(t *testing.T) {
	for name, firstRenewed := range map[string]string{
		"the earlier lease renews first": "earlier",
		"the later lease renews first":   "later",
	} {
		t.Run(name, func(t *testing.T) {
			tl := newTwoLeaders(t, newProxy("p1"))
			// On the old leader: a lease, revoked by a health flip its holder
			// has not noticed yet, and a later lease on the same slot.
			earlier := acquire(t, tl.old, AcquireRequest{Holder: "earlier"})
			tl.upsert(newProxy("p1", notReady()))
			tl.upsert(newProxy("p1"))
			later := acquire(t, tl.old, AcquireRequest{Holder: "later"})
			tl.lead(DefaultTTL)

			if firstRenewed == "earlier" {
				// Nothing proves yet that it ended: it is re-learned...
				if _, err := tl.new.RenewAs("", earlier.ID, 0, Report{}); err != nil {
					t.Fatalf("Renew of the earlier lease: %v", err)
				}
			}
			if _, err := tl.new.RenewAs("", later.ID, 0, Report{}); err != nil {
				t.Fatalf("Renew of the later lease: %v", err)
			}
			// ...until the later lease shows up: one slot, one lease.
			if _, err := tl.new.RenewAs("", earlier.ID, 0, Report{}); !errors.Is(err, ErrSuperseded) {
				t.Errorf("Renew of the earlier lease: err = %v, want ErrSuperseded", err)
			}
			leases, err := tl.new.List(LeaseFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(leases) != 1 || leases[0].Holder != "later" {
				t.Errorf("live leases on the new leader = %+v, want only the later one", leases)
			}
		})
	}
}

func TestReleaseOfAnUnmetLeaseWhileRecovering(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"))
	l := acquire(t, tl.old, AcquireRequest{Holder: "a", Domain: "example.com"})
	tl.lead(10 * time.Second)
	if err := tl.new.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
		t.Fatalf("Release on the new leader: %v", err)
	}
	if _, err := tl.new.RenewAs("", l.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Renew after the release: err = %v, want ErrUnknownLease", err)
	}
	// The ban counted (a short recovery, to look before the cool-down ends).
	tl.clk.Step(10 * time.Second)
	if _, err := tl.new.Acquire(t.Context(), AcquireRequest{Holder: "b", Domain: "example.com"}); !errors.Is(err, ErrCoolingDown) {
		t.Errorf("Acquire for the banned domain: err = %v, want ErrCoolingDown", err)
	}
}

func TestReleasedRelearnedLeaseStaysReleased(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"))
	l := acquire(t, tl.old, AcquireRequest{Holder: "a"})
	tl.lead(DefaultTTL)
	renewed, err := tl.new.RenewAs("", l.ID, 0, Report{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.new.ReleaseAs("", renewed.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	// The old leader's ID is still unexpired, but the lease ended here.
	if _, err := tl.new.RenewAs("", l.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Renew with the old ID after release: err = %v, want ErrUnknownLease", err)
	}
}

func TestALeaseFromANewerTermIsNotRelearned(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"))
	tl.lead(DefaultTTL)
	tl.clk.Step(time.Second)
	tl.old.Lead(time.Time{}, time.Time{}) // a later term than new's: a split brain
	l := acquire(t, tl.old, AcquireRequest{Holder: "a"})
	if _, err := tl.new.RenewAs("", l.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Renew: err = %v, want ErrUnknownLease", err)
	}
}
