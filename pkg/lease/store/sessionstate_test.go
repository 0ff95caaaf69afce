package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSessionStateTravelsWithTheProxy: a state put under a lease comes
// back with the next grant of the same proxy for the same domain, and with
// no other: another domain, another proxy, a ban for the domain, a new
// instance of the proxy all start empty.
func TestSessionStateTravelsWithTheProxy(t *testing.T) {
	ctx := context.Background()
	jar := []byte(`{"cookies":[{"name":"sid","value":"42"}]}`)
	acquire := func(t *testing.T, s *Store, holder, domain string) Lease {
		t.Helper()
		l, err := s.Acquire(ctx, AcquireRequest{Holder: holder, Domain: domain, Owner: "crawler"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	withJar := func(t *testing.T, s *Store) Lease {
		t.Helper()
		l := acquire(t, s, "first", "shop.example")
		if err := s.PutStateAs("crawler", l.ID, jar); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseAs("crawler", l.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
		return l
	}
	t.Run("same proxy, same domain: the jar", func(t *testing.T) {
		s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a")})
		withJar(t, s)
		if got := acquire(t, s, "second", "shop.example"); !bytes.Equal(got.State, jar) {
			t.Errorf("State = %q, want the jar", got.State)
		}
	})
	t.Run("same proxy, another domain: none", func(t *testing.T) {
		s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a")})
		withJar(t, s)
		if got := acquire(t, s, "second", "news.example"); got.State != nil {
			t.Errorf("State = %q, want none", got.State)
		}
	})
	t.Run("another proxy: none", func(t *testing.T) {
		s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a"), newProxy("b", withLatency(20))})
		first := withJar(t, s)
		// Hold both, then give back the one without the jar.
		h1, h2 := acquire(t, s, "holder-1", ""), acquire(t, s, "holder-2", "")
		other := h1
		if h1.Proxy.Key == first.Proxy.Key {
			other = h2
		}
		if err := s.ReleaseAs("crawler", other.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
		if got := acquire(t, s, "second", "shop.example"); got.State != nil || got.Proxy.Key == first.Proxy.Key {
			t.Errorf("on %s: State = %q, want none on the other proxy", got.Proxy.Key, got.State)
		}
	})
	t.Run("banned for the domain: dropped", func(t *testing.T) {
		s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a")})
		l := acquire(t, s, "first", "shop.example")
		if err := s.PutStateAs("crawler", l.ID, jar); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseAs("crawler", l.ID, OutcomeBanned, "", Report{}); err != nil {
			t.Fatal(err)
		}
		clk.Step(s.cfg.CooldownMax) // past the cool-down
		if got := acquire(t, s, "second", "shop.example"); got.State != nil {
			t.Errorf("State = %q after a ban, want none", got.State)
		}
	})
	t.Run("a new instance: none", func(t *testing.T) {
		p := newProxy("a")
		p.ProviderID = "upstream://h:1/s1"
		s, _, _ := newTestStore(t, []ProxyInfo{p})
		withJar(t, s)
		p.ProviderID = "upstream://h:1/s2"
		s.Upsert(p)
		if got := acquire(t, s, "second", "shop.example"); got.State != nil {
			t.Errorf("State = %q on a new instance, want none", got.State)
		}
	})
}

func TestPutStateRefusals(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(2))})
	ctx := context.Background()
	noDomain, err := s.Acquire(ctx, AcquireRequest{Holder: "h", Owner: "crawler"})
	if err != nil {
		t.Fatal(err)
	}
	withDomain, err := s.Acquire(ctx, AcquireRequest{Holder: "h", Owner: "crawler", Domain: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	var field *FieldError
	if err := s.PutStateAs("crawler", noDomain.ID, []byte("x")); !errors.As(err, &field) || field.Field != "domain" {
		t.Errorf("state on a lease without a domain: %v, want a FieldError on domain", err)
	}
	var tooLarge *StateTooLargeError
	if err := s.PutStateAs("crawler", withDomain.ID, make([]byte, MaxStateSize+1)); !errors.As(err, &tooLarge) {
		t.Errorf("state over the cap: %v, want StateTooLargeError", err)
	}
	if err := s.PutStateAs("someone-else", withDomain.ID, []byte("x")); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("another owner's lease: %v, want ErrUnknownLease", err)
	}
}

// TestSessionStatesAreBounded: beyond MaxStateBytes the least recently
// used entries go, counted; each is charged its blob, its key and
// StateEntryOverhead.
func TestSessionStatesAreBounded(t *testing.T) {
	// Every domain below has one letter: every entry costs the same.
	entry := stateKey{owner: "o", proxy: newProxy("a").Key, uid: newProxy("a").UID, domain: "a.example"}.cost(make([]byte, 1<<10))
	s, _, m := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(100))}, withStoreConfig(func(c *Config) { c.MaxStateBytes = 10 * entry }))
	ctx := context.Background()
	for i := range 20 {
		l, err := s.Acquire(ctx, AcquireRequest{Holder: "h", Owner: "o", Domain: string(rune('a'+i)) + ".example"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutStateAs("o", l.ID, make([]byte, 1<<10)); err != nil {
			t.Fatal(err)
		}
	}
	snap := m.Snapshot()
	if diff := cmp.Diff(map[string]int{StateSessionStates: 10}, map[string]int{StateSessionStates: snap.Entries[StateSessionStates]}); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if got := snap.Evictions[StateSessionStates]; got != 10 {
		t.Errorf("%d evictions, want 10", got)
	}
	if got := s.StateBytes(); got != 10*entry {
		t.Errorf("%d bytes charged, want the cap %d", got, 10*entry)
	}
}
