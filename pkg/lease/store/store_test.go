package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestNewValidatesConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     Config
		wantErr bool
	}{
		"defaults":             {cfg: Config{Key: testKey}},
		"short key":            {cfg: Config{Key: testKey[:31]}, wantErr: true},
		"min above max":        {cfg: Config{Key: testKey, MinTTL: time.Minute, MaxTTL: time.Second}, wantErr: true},
		"default out of range": {cfg: Config{Key: testKey, DefaultTTL: time.Hour}, wantErr: true},
		"cool-down max < base": {cfg: Config{Key: testKey, CooldownBase: time.Hour, CooldownMax: time.Minute}, wantErr: true},
		"custom bounds":        {cfg: Config{Key: testKey, MinTTL: time.Second, DefaultTTL: 2 * time.Second, MaxTTL: 3 * time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Errorf("New: err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestSelectionOrder(t *testing.T) {
	type env struct {
		t   *testing.T
		s   *Store
		clk *clocktesting.FakeClock
	}
	// hold acquires the proxy that would be chosen next and checks it is name.
	hold := func(e env, name string, ttl time.Duration) Lease {
		e.t.Helper()
		l := acquire(e.t, e.s, AcquireRequest{TTL: ttl})
		if l.Proxy.Key.Name != name {
			e.t.Fatalf("setup: acquired %s, want %s", l.Proxy.Key.Name, name)
		}
		return l
	}
	for name, tc := range map[string]struct {
		proxies []ProxyInfo
		setup   func(e env)
		req     AcquireRequest
		want    string
		wantErr error
	}{
		"never released: lower latency first": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(30)), newProxy("p2", withLatency(10)), newProxy("p3", withLatency(20))},
			want:    "p2",
		},
		"full tie: the name decides": {
			proxies: []ProxyInfo{newProxy("b"), newProxy("a")},
			want:    "a",
		},
		"never released before released": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(50))},
			setup: func(e env) {
				release(e.t, e.s, hold(e, "p1", 0))
			},
			want: "p2",
		},
		"least recently released first, whatever the latency": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(50)), newProxy("p2", withLatency(10)), newProxy("p3", withLatency(30))},
			setup: func(e env) {
				l2, l3, l1 := hold(e, "p2", 0), hold(e, "p3", 0), hold(e, "p1", 0)
				for _, l := range []Lease{l1, l2, l3} {
					e.clk.Step(time.Second)
					release(e.t, e.s, l)
				}
			},
			want: "p1",
		},
		"released at the same instant: lower latency first": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(50)), newProxy("p2", withLatency(10)), newProxy("p3", withLatency(1))},
			setup: func(e env) {
				l3, l2, l1 := hold(e, "p3", 0), hold(e, "p2", 0), hold(e, "p1", 0)
				e.clk.Step(time.Second)
				release(e.t, e.s, l1)
				release(e.t, e.s, l2)
				e.clk.Step(time.Second)
				release(e.t, e.s, l3)
			},
			want: "p2",
		},
		"a release read from a clock behind the last one's sorts no earlier than it": {
			// Releases read the clock before they lock the store; one that
			// waited for the lock is stamped with the latest release's time
			// (docs/decisions/0163-release-stamped-no-earlier-than-release.md), and the tie goes to the lower latency.
			proxies: []ProxyInfo{newProxy("p1", withLatency(50)), newProxy("p2", withLatency(10))},
			setup: func(e env) {
				l2, l1 := hold(e, "p2", 0), hold(e, "p1", 0)
				start := e.clk.Now()
				e.clk.SetTime(start.Add(2 * time.Second))
				release(e.t, e.s, l2)
				e.clk.SetTime(start.Add(time.Second))
				release(e.t, e.s, l1)
			},
			want: "p2",
		},
		"an expiry counts as a release": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(20))},
			setup: func(e env) {
				hold(e, "p1", 5*time.Second)
				l2 := hold(e, "p2", 0)
				e.clk.Step(3 * time.Second)
				release(e.t, e.s, l2) // p2 released at +3s, p1 expires at +5s
				e.clk.Step(3 * time.Second)
			},
			want: "p2",
		},
		"a latency change re-sorts": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(20))},
			setup: func(e env) {
				e.s.Upsert(newProxy("p1", withLatency(30)))
			},
			want: "p2",
		},
		"full proxies are skipped": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(20))},
			setup:   func(e env) { hold(e, "p1", 0) },
			want:    "p2",
		},
		"a proxy with free slots is taken again": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10), withMaxLeases(2)), newProxy("p2", withLatency(20))},
			setup:   func(e env) { hold(e, "p1", 0) },
			want:    "p1",
		},
		"label selector": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10), withLabels("region", "us")), newProxy("p2", withLatency(20), withLabels("region", "eu"))},
			req:     AcquireRequest{Selector: labels.SelectorFromSet(labels.Set{"region": "eu"})},
			want:    "p2",
		},
		"namespace": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10), inNamespace("other")), newProxy("p2", withLatency(20))},
			req:     AcquireRequest{Namespace: testNamespace},
			want:    "p2",
		},
		"any namespace": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10), inNamespace("other")), newProxy("p2", withLatency(20))},
			want:    "p1",
		},
		"not Ready is never chosen": {
			proxies: []ProxyInfo{newProxy("p1", withLatency(10), notReady()), newProxy("p2", withLatency(20))},
			want:    "p2",
		},
		"nothing matches the selector": {
			proxies: []ProxyInfo{newProxy("p1", withLabels("region", "us"))},
			req:     AcquireRequest{Selector: labels.SelectorFromSet(labels.Set{"region": "eu"})},
			wantErr: ErrNoneFree,
		},
		"an empty namespace": {
			proxies: []ProxyInfo{newProxy("p1")},
			req:     AcquireRequest{Namespace: "empty"},
			wantErr: ErrNoneFree,
		},
		"everything held": {
			proxies: []ProxyInfo{newProxy("p1")},
			setup:   func(e env) { hold(e, "p1", 0) },
			wantErr: ErrNoneFree,
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, clk, _ := newTestStore(t, tc.proxies)
			if tc.setup != nil {
				tc.setup(env{t: t, s: s, clk: clk})
			}
			tc.req.Holder = "w"
			l, err := s.Acquire(context.Background(), tc.req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Acquire: err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && l.Proxy.Key.Name != tc.want {
				t.Errorf("Acquire chose %s, want %s", l.Proxy.Key.Name, tc.want)
			}
		})
	}
}

func TestStickySessions(t *testing.T) {
	session := AcquireRequest{Session: "s1", Namespace: testNamespace}
	for name, tc := range map[string]struct {
		// Each test first leases p1 for session s1 and releases it, so that
		// p2 (never released) comes first in the order.
		between func(t *testing.T, s *Store, clk *clocktesting.FakeClock)
		req     AcquireRequest
		want    string
	}{
		"the session's proxy again": {want: "p1"},
		"without the session: the order": {
			req:  AcquireRequest{Namespace: testNamespace},
			want: "p2",
		},
		"another session: the order": {
			req:  AcquireRequest{Session: "s2", Namespace: testNamespace},
			want: "p2",
		},
		"the session's proxy is held: the order": {
			between: func(t *testing.T, s *Store, _ *clocktesting.FakeClock) {
				s.Upsert(newProxy("p2", withLatency(20), notReady())) // so that the holder below gets p1
				acquire(t, s, AcquireRequest{Holder: "other"})
				s.Upsert(newProxy("p2", withLatency(20)))
			},
			want: "p2",
		},
		"the session's proxy is not Ready: the order": {
			between: func(_ *testing.T, s *Store, _ *clocktesting.FakeClock) {
				s.Upsert(newProxy("p1", withLatency(10), notReady()))
			},
			want: "p2",
		},
		"the session's proxy no longer matches the selector": {
			between: func(_ *testing.T, s *Store, _ *clocktesting.FakeClock) {
				s.Upsert(newProxy("p1", withLatency(10), withLabels("tier", "slow")))
				s.Upsert(newProxy("p2", withLatency(20), withLabels("tier", "fast")))
			},
			req:  AcquireRequest{Session: "s1", Namespace: testNamespace, Selector: labels.SelectorFromSet(labels.Set{"tier": "fast"})},
			want: "p2",
		},
		"the session's proxy cools down for the domain": {
			between: func(t *testing.T, s *Store, _ *clocktesting.FakeClock) {
				l := acquire(t, s, AcquireRequest{Session: "s1", Namespace: testNamespace})
				if err := s.ReleaseAs("", l.ID, OutcomeBanned, "example.com", Report{}); err != nil {
					t.Fatal(err)
				}
			},
			req:  AcquireRequest{Session: "s1", Namespace: testNamespace, Domain: "example.com"},
			want: "p2",
		},
		"an idle session is forgotten": {
			between: func(_ *testing.T, _ *Store, clk *clocktesting.FakeClock) {
				clk.Step(DefaultSessionIdle + time.Second)
			},
			want: "p2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(20))})
			first := acquire(t, s, session)
			if first.Proxy.Key.Name != "p1" {
				t.Fatalf("first lease on %s, want p1", first.Proxy.Key.Name)
			}
			clk.Step(time.Second)
			release(t, s, first)
			if tc.between != nil {
				tc.between(t, s, clk)
			}
			req := tc.req
			if req == (AcquireRequest{}) {
				req = session
			}
			if got := acquire(t, s, req); got.Proxy.Key.Name != tc.want {
				t.Errorf("Acquire chose %s, want %s", got.Proxy.Key.Name, tc.want)
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	s, clk, m := newTestStore(t, []ProxyInfo{newProxy("p1"), newProxy("p2"), newProxy("p3")})
	l30 := acquire(t, s, AcquireRequest{TTL: 30 * time.Second})
	l10 := acquire(t, s, AcquireRequest{TTL: 10 * time.Second})
	l20 := acquire(t, s, AcquireRequest{TTL: 20 * time.Second})

	live := func() []string {
		t.Helper()
		leases, err := s.List(LeaseFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range leases {
			names = append(names, l.Proxy.Key.Name)
		}
		return names
	}
	steps := []struct {
		step time.Duration
		want []string
	}{
		{step: 9 * time.Second, want: []string{l30.Proxy.Key.Name, l10.Proxy.Key.Name, l20.Proxy.Key.Name}},
		{step: time.Second, want: []string{l30.Proxy.Key.Name, l20.Proxy.Key.Name}}, // at exactly expiresAt it is gone
		{step: 10 * time.Second, want: []string{l30.Proxy.Key.Name}},
	}
	for _, st := range steps {
		clk.Step(st.step)
		if diff := cmp.Diff(st.want, live()); diff != "" {
			t.Fatalf("after %v more: live leases (-want +got):\n%s", st.step, diff)
		}
	}
	if _, err := s.RenewAs("", l10.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Renew of an expired lease: err = %v, want ErrUnknownLease", err)
	}
	if err := s.ReleaseAs("", l20.ID, OutcomeOK, "", Report{}); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Release of an expired lease: err = %v, want ErrUnknownLease", err)
	}
	// A renewal moves the lease in the heap: it outlives its first expiry.
	renewed, err := s.RenewAs("", l30.ID, time.Minute, Report{})
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(time.Minute); !renewed.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
	}
	clk.Step(30 * time.Second)
	if diff := cmp.Diff([]string{l30.Proxy.Key.Name}, live()); diff != "" {
		t.Errorf("after the first expiry: live leases (-want +got):\n%s", diff)
	}
	// The old ID names the same lease (on the same leader).
	if _, err := s.RenewAs("", l30.ID, 0, Report{}); err != nil {
		t.Errorf("Renew with the first ID: %v", err)
	}
	clk.Step(time.Minute)
	s.Advance()
	if got := live(); len(got) != 0 {
		t.Errorf("after every expiry: live leases %v", got)
	}
	got := m.Snapshot()
	if got.Ends[EndExpired] != 3 || got.Active != 0 {
		t.Errorf("metrics: expired = %d, active = %d; want 3, 0", got.Ends[EndExpired], got.Active)
	}
}

func TestRevocation(t *testing.T) {
	p := newProxy("p1", withMaxLeases(3))
	for name, tc := range map[string]struct {
		change      func(s *Store)
		wantRevoked []int32 // slots
	}{
		"not Ready":                {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), notReady())) }, wantRevoked: []int32{0, 1, 2}},
		"deleted":                  {change: func(s *Store) { s.Remove(p.Key) }, wantRevoked: []int32{0, 1, 2}},
		"recreated (UID)":          {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), withUID("new"))) }, wantRevoked: []int32{0, 1, 2}},
		"replaced (URL)":           {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), withURL("http://127.0.0.2:3128"))) }, wantRevoked: []int32{0, 1, 2}},
		"was not Ready in between": {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), readySince(t0.Add(time.Minute)))) }, wantRevoked: []int32{0, 1, 2}},
		"maxLeases 3 to 1":         {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(1))) }, wantRevoked: []int32{1, 2}},
		"latency changed":          {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), withLatency(99))) }},
		"labels changed":           {change: func(s *Store) { s.Upsert(newProxy("p1", withMaxLeases(3), withLabels("a", "b"))) }},
	} {
		t.Run(name, func(t *testing.T) {
			s, clk, m := newTestStore(t, []ProxyInfo{p})
			var leases []Lease
			for range 3 {
				leases = append(leases, acquire(t, s, AcquireRequest{}))
			}
			tc.change(s)
			revoked := map[int32]bool{}
			for _, slot := range tc.wantRevoked {
				revoked[slot] = true
			}
			for _, l := range leases {
				_, err := s.RenewAs("", l.ID, 0, Report{})
				if revoked[l.Slot] && !errors.Is(err, ErrRevoked) {
					t.Errorf("Renew of the lease in slot %d: err = %v, want ErrRevoked", l.Slot, err)
				}
				if !revoked[l.Slot] && err != nil {
					t.Errorf("Renew of the lease in slot %d: %v", l.Slot, err)
				}
			}
			if got := m.Snapshot().Ends[EndRevoked]; got != len(tc.wantRevoked) {
				t.Errorf("revoked leases in metrics = %d, want %d", got, len(tc.wantRevoked))
			}
			if len(tc.wantRevoked) == 0 {
				return
			}
			victim := leases[tc.wantRevoked[0]]
			// Releasing a revoked lease is fine: it is over either way.
			if err := s.ReleaseAs("", victim.ID, OutcomeOK, "", Report{}); err != nil {
				t.Errorf("Release of a revoked lease: %v", err)
			}
			// The tombstone lasts until the lease would have expired.
			clk.Step(DefaultTTL)
			if _, err := s.RenewAs("", victim.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
				t.Errorf("Renew after the revoked lease's expiry: err = %v, want ErrUnknownLease", err)
			}
		})
	}
}

func TestRevocationFreesCapacityWhenReadyAgain(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	first := acquire(t, s, AcquireRequest{})
	s.Upsert(newProxy("p1", notReady()))
	if _, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w"}); !errors.Is(err, ErrNoneFree) {
		t.Fatalf("Acquire while not Ready: err = %v, want ErrNoneFree", err)
	}
	s.Upsert(newProxy("p1"))
	second := acquire(t, s, AcquireRequest{})
	if second.Slot != 0 || second.ID == first.ID {
		t.Errorf("second lease: slot %d, same ID %v; want slot 0, a new ID", second.Slot, second.ID == first.ID)
	}
	if _, err := s.RenewAs("", first.ID, 0, Report{}); !errors.Is(err, ErrRevoked) {
		t.Errorf("Renew of the first lease: err = %v, want ErrRevoked", err)
	}
}

func TestCooldownDuration(t *testing.T) {
	for name, tc := range map[string]struct {
		strikes int
		want    time.Duration
	}{
		"first ban":     {strikes: 1, want: time.Minute},
		"second ban":    {strikes: 2, want: 2 * time.Minute},
		"sixth ban":     {strikes: 6, want: 32 * time.Minute},
		"capped":        {strikes: 7, want: time.Hour},
		"stays capped":  {strikes: 100, want: time.Hour},
		"no overflow":   {strikes: 1 << 30, want: time.Hour},
		"zero as first": {strikes: 0, want: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			if got := cooldownDuration(tc.strikes, time.Minute, time.Hour); got != tc.want {
				t.Errorf("cooldownDuration(%d) = %v, want %v", tc.strikes, got, tc.want)
			}
		})
	}
}

func TestDecayedStrikes(t *testing.T) {
	until := t0
	for name, tc := range map[string]struct {
		now  time.Time
		want int
	}{
		"in force":              {now: until.Add(-time.Second), want: 3},
		"just ended":            {now: until.Add(time.Second), want: 3},
		"one decay period":      {now: until.Add(time.Hour), want: 2},
		"two and a half":        {now: until.Add(150 * time.Minute), want: 1},
		"long quiet: forgotten": {now: until.Add(48 * time.Hour), want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decayedStrikes(3, until, tc.now, time.Hour); got != tc.want {
				t.Errorf("decayedStrikes = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCooldownGrowsAndCaps(t *testing.T) {
	s, clk, m := newTestStore(t, []ProxyInfo{newProxy("p1")})
	const domain = "example.com"
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	var got []time.Duration
	for range want {
		l := acquire(t, s, AcquireRequest{Domain: domain})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil { // the lease's domain
			t.Fatal(err)
		}
		_, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", Domain: "EXAMPLE.com."})
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || !errors.Is(err, ErrCoolingDown) {
			t.Fatalf("Acquire after a ban: err = %v, want ErrCoolingDown", err)
		}
		got = append(got, unavailable.RetryAfter)
		if m.Snapshot().Cooldowns != 1 {
			t.Fatalf("cool-downs in force = %d, want 1", m.Snapshot().Cooldowns)
		}
		// Other domains, and no domain, are not affected.
		release(t, s, acquire(t, s, AcquireRequest{Domain: "other.example"}))
		release(t, s, acquire(t, s, AcquireRequest{}))
		clk.Step(unavailable.RetryAfter)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cool-downs (-want +got):\n%s", diff)
	}
	acquire(t, s, AcquireRequest{Domain: domain})
	if m.Snapshot().Cooldowns != 0 {
		t.Errorf("cool-downs in force after the last one ended = %d, want 0", m.Snapshot().Cooldowns)
	}
}

// A ban on one name of a site cools the proxy down for every name of it
// (issue 64: a hostile site's names each banned every proxy anew), and
// for no other site, a sibling under a public suffix (github.io) included.
func TestCooldownIsPerSite(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	for _, banned := range []string{"a.shop.example.com", "alice.github.io"} {
		l := acquire(t, s, AcquireRequest{})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, banned, Report{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, domain := range []string{"shop.example.com", "b.shop.example.com", "example.com", "www.example.com", "example.org", "alice.github.io", "bob.github.io"} {
		l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", Domain: domain})
		got[domain] = errors.Is(err, ErrCoolingDown)
		if err == nil {
			release(t, s, l)
		}
	}
	want := map[string]bool{"shop.example.com": true, "b.shop.example.com": true, "example.com": true, "www.example.com": true,
		"example.org": false, "alice.github.io": true, "bob.github.io": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cooling down for (-want +got):\n%s", diff)
	}
}

func TestCooldownDecays(t *testing.T) {
	const domain = "example.com"
	banFor := func(t *testing.T, s *Store) time.Duration {
		t.Helper()
		l := acquire(t, s, AcquireRequest{})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, domain, Report{}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", Domain: domain})
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) {
			t.Fatalf("Acquire after a ban: err = %v", err)
		}
		return unavailable.RetryAfter
	}
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	first := banFor(t, s)
	clk.Step(first)
	second := banFor(t, s)
	// Quiet for one decay period after the second ended: one strike is forgotten.
	clk.Step(second + DefaultCooldownDecay)
	third := banFor(t, s)
	// Quiet for long enough to forget everything: back to the base, and the entry is gone meanwhile.
	clk.Step(third + 10*DefaultCooldownDecay)
	s.Advance()
	if n := len(s.st.cooldowns.heap); n != 0 {
		t.Errorf("%d cool-down entries remembered after a long quiet period, want 0", n)
	}
	fourth := banFor(t, s)
	got := []time.Duration{first, second, third, fourth}
	want := []time.Duration{time.Minute, 2 * time.Minute, 2 * time.Minute, time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cool-downs (-want +got):\n%s", diff)
	}
}

func TestBannedReleaseNeedsADomain(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	l := acquire(t, s, AcquireRequest{})
	var field *FieldError
	if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); !errors.As(err, &field) || field.Field != "domain" {
		t.Errorf("banned release without a domain: err = %v, want a FieldError on domain", err)
	}
	if err := s.ReleaseAs("", l.ID, "weird", "", Report{}); !errors.As(err, &field) || field.Field != "outcome" {
		t.Errorf("release with an unknown outcome: err = %v, want a FieldError on outcome", err)
	}
	// The failed releases left the lease alone.
	if _, err := s.RenewAs("", l.ID, 0, Report{}); err != nil {
		t.Errorf("Renew: %v", err)
	}
}

func TestTTLBounds(t *testing.T) {
	for name, tc := range map[string]struct {
		ttl, wait time.Duration
		wantTTL   time.Duration
		wantField string
	}{
		"default":       {wantTTL: DefaultTTL},
		"minimum":       {ttl: DefaultMinTTL, wantTTL: DefaultMinTTL},
		"maximum":       {ttl: DefaultMaxTTL, wantTTL: DefaultMaxTTL},
		"below minimum": {ttl: DefaultMinTTL - time.Millisecond, wantField: "ttl"},
		"above maximum": {ttl: DefaultMaxTTL + time.Millisecond, wantField: "ttl"},
		"negative":      {ttl: -time.Second, wantField: "ttl"},
		"wait too long": {wait: DefaultMaxWait + time.Second, wantField: "wait"},
		"negative wait": {wait: -time.Second, wantField: "wait"},
	} {
		t.Run(name, func(t *testing.T) {
			s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
			l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", TTL: tc.ttl, Wait: tc.wait})
			var field *FieldError
			if tc.wantField != "" {
				if !errors.As(err, &field) || field.Field != tc.wantField {
					t.Errorf("Acquire: err = %v, want a FieldError on %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.TTL != tc.wantTTL || !l.ExpiresAt.Equal(clk.Now().Add(tc.wantTTL)) {
				t.Errorf("TTL %v, expires %v; want %v from now", l.TTL, l.ExpiresAt, tc.wantTTL)
			}
			// Renewals keep to the same bounds, and 0 keeps the lease's TTL.
			if _, err := s.RenewAs("", l.ID, DefaultMaxTTL+time.Second, Report{}); !errors.As(err, &field) || field.Field != "ttl" {
				t.Errorf("Renew above the maximum: err = %v, want a FieldError on ttl", err)
			}
			clk.Step(time.Second)
			renewed, err := s.RenewAs("", l.ID, 0, Report{})
			if err != nil {
				t.Fatal(err)
			}
			if !renewed.ExpiresAt.Equal(clk.Now().Add(tc.wantTTL)) {
				t.Errorf("renewed expiry %v, want %v from now", renewed.ExpiresAt, tc.wantTTL)
			}
		})
	}
}

func TestAcquireNeedsAHolderAndALeader(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	var field *FieldError
	if _, err := s.Acquire(context.Background(), AcquireRequest{}); !errors.As(err, &field) || field.Field != "holder" {
		t.Errorf("Acquire without a holder: err = %v, want a FieldError on holder", err)
	}
	l := acquire(t, s, AcquireRequest{})
	if last := s.Abdicate(); !last.Equal(l.ExpiresAt) {
		t.Errorf("Abdicate returned %v, want the lease's expiry %v", last, l.ExpiresAt)
	}
	for name, err := range map[string]error{
		"Acquire": func() error { _, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w"}); return err }(),
		"Renew":   func() error { _, err := s.RenewAs("", l.ID, 0, Report{}); return err }(),
		"Release": s.ReleaseAs("", l.ID, OutcomeOK, "", Report{}),
		"Get":     func() error { _, err := s.GetAs("", l.ID); return err }(),
		"List":    func() error { _, err := s.List(LeaseFilter{}); return err }(),
	} {
		if !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s after Abdicate: err = %v, want ErrNotLeader", name, err)
		}
	}
}

func TestForgedAndForeignIDs(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	l := acquire(t, s, AcquireRequest{})
	other, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")}, withStoreConfig(func(c *Config) {
		c.Key = []byte("another key of thirty-two bytes!")
	}))
	flipped := []byte(l.ID)
	flipped[len(flipped)/2] ^= 1
	for name, id := range map[string]string{
		"empty":          "",
		"garbage":        "not-a-lease",
		"one bit off":    string(flipped),
		"truncated":      l.ID[:len(l.ID)-4],
		"very long":      string(make([]byte, 5000)),
		"not base64 url": l.ID + "==",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.RenewAs("", id, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
				t.Errorf("Renew: err = %v, want ErrUnknownLease", err)
			}
			if _, err := s.LeaseNamespace("", id); !errors.Is(err, ErrUnknownLease) {
				t.Errorf("LeaseNamespace: err = %v, want ErrUnknownLease", err)
			}
		})
	}
	t.Run("signed with another key", func(t *testing.T) {
		if _, err := other.RenewAs("", l.ID, 0, Report{}); !errors.Is(err, ErrUnknownLease) {
			t.Errorf("Renew: err = %v, want ErrUnknownLease", err)
		}
	})
}

func TestTokenRoundTrip(t *testing.T) {
	sg := newSigner(testKey)
	want := token{
		key: leaseKey{epoch: 1 << 60, serial: 42}, slot: 9999,
		grantedAt: t0, expiresAt: t0.Add(time.Minute), ttl: time.Minute, urlHash: urlHash("http://127.0.0.1:1"), readySince: t0.Add(-time.Hour),
		proxy: ObjectName{"ns", "name"}, proxyUID: "uid", holder: "wörker 1", domain: "example.com",
	}
	got, err := sg.decode(sg.encode(want))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(token{}, leaseKey{}), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestListAndProxies(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{
		newProxy("p1", withLabels("region", "eu"), withMaxLeases(2)),
		newProxy("p2", withLabels("region", "us"), withLatency(20)),
		newProxy("p3", inNamespace("other")),
		newProxy("p4", notReady()),
	})
	a := acquire(t, s, AcquireRequest{Holder: "a", Namespace: testNamespace})
	acquire(t, s, AcquireRequest{Holder: "b", Namespace: "other"})
	names := func(leases []Lease) []string {
		var out []string
		for _, l := range leases {
			out = append(out, l.Holder+"@"+l.Proxy.Key.String())
		}
		return out
	}
	for name, tc := range map[string]struct {
		filter LeaseFilter
		want   []string
	}{
		"all":          {want: []string{"a@crawl/p1", "b@other/p3"}},
		"by holder":    {filter: LeaseFilter{Holder: "a"}, want: []string{"a@crawl/p1"}},
		"by namespace": {filter: LeaseFilter{Namespace: "other"}, want: []string{"b@other/p3"}},
		"no match":     {filter: LeaseFilter{Holder: "c"}},
	} {
		t.Run("List "+name, func(t *testing.T) {
			got, err := s.List(tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	got, err := s.GetAs("", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Holder != "a" || got.Proxy.Key.Name != "p1" {
		t.Errorf("Get = %+v", got)
	}

	proxies := s.Proxies(testNamespace, nil)
	want := []ProxyStatus{
		{Key: ObjectName{testNamespace, "p1"}, URL: newProxy("p1").URL, Labels: map[string]string{"region": "eu"}, LatencyMillis: 10, MaxLeases: 2, FreeLeases: 1},
		{Key: ObjectName{testNamespace, "p2"}, URL: newProxy("p2").URL, Labels: map[string]string{"region": "us"}, LatencyMillis: 20, MaxLeases: 1, FreeLeases: 1},
	}
	if diff := cmp.Diff(want, proxies); diff != "" {
		t.Errorf("Proxies (-want +got):\n%s", diff)
	}
	if got := s.Proxies("", labels.SelectorFromSet(labels.Set{"region": "us"})); len(got) != 1 || got[0].Key.Name != "p2" {
		t.Errorf("Proxies by selector = %+v, want p2", got)
	}
}
