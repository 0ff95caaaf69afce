package store

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type acquireResult struct {
	lease Lease
	err   error
}

// acquireAsync starts an acquire that waits, and returns once it sleeps on
// the fake clock.
func acquireAsync(t *testing.T, ctx context.Context, s *Store, clk *clocktesting.FakeClock, req AcquireRequest) <-chan acquireResult {
	t.Helper()
	req.Holder = "waiter"
	done := make(chan acquireResult, 1)
	go func() {
		l, err := s.Acquire(ctx, req)
		done <- acquireResult{l, err}
	}()
	waitForTimer(t, clk)
	return done
}

func result(t *testing.T, done <-chan acquireResult) acquireResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting acquire did not return")
		return acquireResult{}
	}
}

func TestWaitIsWoken(t *testing.T) {
	const domain = "example.com"
	for name, tc := range map[string]struct {
		// hold sets up a store where nothing fits the request.
		hold func(t *testing.T, s *Store) Lease
		req  AcquireRequest
		// wake makes room, without stepping past the wait.
		wake func(t *testing.T, s *Store, clk *clocktesting.FakeClock, held Lease)
		want string
	}{
		"by a release": {
			hold: func(t *testing.T, s *Store) Lease { return acquire(t, s, AcquireRequest{}) },
			wake: func(t *testing.T, s *Store, _ *clocktesting.FakeClock, held Lease) { release(t, s, held) },
			want: "p1",
		},
		"by an expiry": {
			hold: func(t *testing.T, s *Store) Lease { return acquire(t, s, AcquireRequest{TTL: 5 * time.Second}) },
			wake: func(_ *testing.T, _ *Store, clk *clocktesting.FakeClock, _ Lease) { clk.Step(5 * time.Second) },
			want: "p1",
		},
		"by a new Ready proxy": {
			hold: func(t *testing.T, s *Store) Lease { return acquire(t, s, AcquireRequest{}) },
			wake: func(_ *testing.T, s *Store, _ *clocktesting.FakeClock, _ Lease) { s.Upsert(newProxy("p2")) },
			want: "p2",
		},
		"by more capacity": {
			hold: func(t *testing.T, s *Store) Lease { return acquire(t, s, AcquireRequest{}) },
			wake: func(_ *testing.T, s *Store, _ *clocktesting.FakeClock, _ Lease) {
				s.Upsert(newProxy("p1", withMaxLeases(2)))
			},
			want: "p1",
		},
		"by the end of a cool-down": {
			hold: func(t *testing.T, s *Store) Lease {
				l := acquire(t, s, AcquireRequest{})
				if err := s.ReleaseAs("", l.ID, OutcomeBanned, domain, Report{}); err != nil {
					t.Fatal(err)
				}
				return l
			},
			req:  AcquireRequest{Domain: domain},
			wake: func(_ *testing.T, _ *Store, clk *clocktesting.FakeClock, _ Lease) { clk.Step(DefaultCooldownBase) },
			want: "p1",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, clk, m := newTestStore(t, []ProxyInfo{newProxy("p1")})
			held := tc.hold(t, s)
			req := tc.req
			req.Wait = DefaultMaxWait
			done := acquireAsync(t, t.Context(), s, clk, req)
			select {
			case r := <-done:
				t.Fatalf("the acquire returned before anything was freed: %+v", r)
			default:
			}
			tc.wake(t, s, clk, held)
			r := result(t, done)
			if r.err != nil {
				t.Fatalf("waiting acquire: %v", r.err)
			}
			if r.lease.Proxy.Key.Name != tc.want {
				t.Errorf("waiting acquire got %s, want %s", r.lease.Proxy.Key.Name, tc.want)
			}
			if got := m.Snapshot().Acquires[AcquireWaited]; got != 1 {
				t.Errorf("waited acquires = %d, want 1", got)
			}
		})
	}
}

func TestWaitTimesOut(t *testing.T) {
	s, clk, m := newTestStore(t, []ProxyInfo{newProxy("p1")})
	acquire(t, s, AcquireRequest{TTL: time.Minute})
	done := acquireAsync(t, t.Context(), s, clk, AcquireRequest{Wait: 10 * time.Second})

	// Short of the deadline: still waiting, asleep again.
	clk.Step(9 * time.Second)
	waitForTimer(t, clk)
	select {
	case r := <-done:
		t.Fatalf("returned before its wait was over: %+v", r)
	default:
	}
	clk.Step(time.Second)
	r := result(t, done)
	var unavailable *UnavailableError
	if !errors.As(r.err, &unavailable) || !errors.Is(r.err, ErrNoneFree) {
		t.Fatalf("err = %v, want ErrNoneFree", r.err)
	}
	if got := m.Snapshot().Acquires[AcquireNoneFree]; got != 1 {
		t.Errorf("none_free acquires = %d, want 1", got)
	}
}

func TestWaitHonoursTheContext(t *testing.T) {
	s, clk, m := newTestStore(t, []ProxyInfo{newProxy("p1")})
	acquire(t, s, AcquireRequest{})
	ctx, cancel := context.WithCancel(t.Context())
	done := acquireAsync(t, ctx, s, clk, AcquireRequest{Wait: DefaultMaxWait})
	cancel()
	if r := result(t, done); !errors.Is(r.err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", r.err)
	}
	if got := m.Snapshot().Acquires[AcquireCanceled]; got != 1 {
		t.Errorf("canceled acquires = %d, want 1", got)
	}
}

func TestWaitEndsWithTheTerm(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	acquire(t, s, AcquireRequest{})
	done := acquireAsync(t, t.Context(), s, clk, AcquireRequest{Wait: DefaultMaxWait})
	s.Abdicate()
	if r := result(t, done); !errors.Is(r.err, ErrNotLeader) {
		t.Errorf("err = %v, want ErrNotLeader", r.err)
	}
}

func TestManyWaitersShareOneRelease(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	held := acquire(t, s, AcquireRequest{})
	first := acquireAsync(t, t.Context(), s, clk, AcquireRequest{Wait: 30 * time.Second})
	second := acquireAsync(t, t.Context(), s, clk, AcquireRequest{Wait: 20 * time.Second})
	release(t, s, held)
	// Exactly one of them gets p1; the other goes back to sleep.
	var winner acquireResult
	var loser <-chan acquireResult
	select {
	case winner = <-first:
		loser = second
	case winner = <-second:
		loser = first
	case <-time.After(10 * time.Second):
		t.Fatal("nobody got the released proxy")
	}
	if winner.err != nil {
		t.Fatalf("winner: %v", winner.err)
	}
	waitForTimer(t, clk)
	select {
	case r := <-loser:
		t.Fatalf("the second waiter returned too: %+v", r)
	default:
	}
	clk.Step(30 * time.Second)
	if r := result(t, loser); !errors.Is(r.err, ErrNoneFree) {
		t.Errorf("second waiter: err = %v, want ErrNoneFree", r.err)
	}
}
