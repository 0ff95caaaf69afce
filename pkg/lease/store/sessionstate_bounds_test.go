package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// Issue 48, items 1 and 2: session state is bounded by what it costs the
// heap, belongs to the identity that stored it, and is kept only for a
// lease's own domain.

// keepState acquires for owner and domain on s, keeps blob under the
// lease and releases it.
func keepState(t *testing.T, s *Store, owner, domain string, blob []byte) {
	t.Helper()
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Owner: owner, Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutStateAs(owner, l.ID, blob); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseAs(owner, l.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
}

// stateFor is the state a grant for owner and domain carries (released).
func stateFor(t *testing.T, s *Store, owner, domain string) []byte {
	t.Helper()
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Owner: owner, Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseAs(owner, l.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	return l.State
}

// TestSessionStateCapChargesEveryEntry: the cap counts each entry's key
// and overhead, not only its body: 1-byte states cannot pile up under it.
func TestSessionStateCapChargesEveryEntry(t *testing.T) {
	const limit = 64 << 10
	s, _, m := newTestStore(t, []ProxyInfo{newProxy("a")}, withStoreConfig(func(c *Config) { c.MaxStateBytes = limit }))
	for i := range 2000 {
		keepState(t, s, "o", fmt.Sprintf("d%d.example", i), []byte("x"))
	}
	kept := m.Snapshot().Entries[StateSessionStates]
	// Each entry costs the heap about 450 bytes (TestStateCapCountsWhatTheHeapHolds).
	if kept*256 > limit || s.StateBytes() > limit {
		t.Errorf("%d one-byte states kept, charged %d bytes, under a cap of %d bytes: want at most %d", kept, s.StateBytes(), limit, limit/256)
	}
}

// TestSessionStateCapsOnEntriesAndPerOwner: the entries cap binds on its
// own; an identity over its cap evicts its own states, not another's.
func TestSessionStateCapsOnEntriesAndPerOwner(t *testing.T) {
	entry := stateKey{owner: "o1", proxy: newProxy("a").Key, uid: newProxy("a").UID, domain: "d0.example"}.cost([]byte("x"))
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a")}, withStoreConfig(func(c *Config) {
		c.MaxStateEntries = 5
		c.MaxStateBytesPerOwner = 3 * entry
	}))
	for i := range 2 {
		keepState(t, s, "o2", fmt.Sprintf("d%d.example", i), []byte("x"))
	}
	for i := range 10 {
		keepState(t, s, "o1", fmt.Sprintf("d%d.example", i), []byte("x"))
	}
	if got := s.StateEntries(); got != 5 {
		t.Errorf("%d entries, want o1's 3 and o2's 2", got)
	}
	for i, want := range map[int]bool{0: true, 1: true} {
		if got := stateFor(t, s, "o2", fmt.Sprintf("d%d.example", i)) != nil; got != want {
			t.Errorf("o2's d%d kept: %v, want %v (o1's cap evicts o1's own)", i, got, want)
		}
	}
	for i := range 10 {
		if got, want := stateFor(t, s, "o1", fmt.Sprintf("d%d.example", i)) != nil, i >= 7; got != want {
			t.Errorf("o1's d%d kept: %v, want %v (its 3 most recent)", i, got, want)
		}
	}
	for i := range 10 { // o3 fills the entries cap: the least recently used go, whoever's
		keepState(t, s, "o3", fmt.Sprintf("d%d.example", i), []byte("x"))
	}
	if got := s.StateEntries(); got != 5 {
		t.Errorf("%d entries, want the cap 5", got)
	}
}

// TestSessionStateBelongsToItsIdentity: a grant carries only the state
// its own identity kept for the proxy and domain; one identity's ban drops
// its own state, not another's.
func TestSessionStateBelongsToItsIdentity(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a")})
	alice, bob := []byte("alice's jar"), []byte("bob's jar")
	keepState(t, s, "alice", "shop.example", alice)
	if got := stateFor(t, s, "bob", "shop.example"); got != nil {
		t.Fatalf("bob, on the proxy and domain alice kept a jar for, got %q; want none", got)
	}
	keepState(t, s, "bob", "shop.example", bob)
	if got := stateFor(t, s, "alice", "shop.example"); !bytes.Equal(got, alice) {
		t.Errorf("alice got %q, want her jar", got)
	}
	l, err := s.Acquire(context.Background(), AcquireRequest{Holder: "h", Owner: "bob", Domain: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseAs("bob", l.ID, OutcomeBanned, "", Report{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(s.cfg.CooldownMax) // past the cool-down
	if got := stateFor(t, s, "bob", "shop.example"); got != nil {
		t.Errorf("bob after his ban got %q, want none", got)
	}
	if got := stateFor(t, s, "alice", "shop.example"); !bytes.Equal(got, alice) {
		t.Errorf("alice after bob's ban got %q, want her jar", got)
	}
}

// TestSessionStatePutOnlyForTheLeasesOwnDomain: the session call keeps
// state only for the domain its session's lease is for: naming another is
// a 400 that plants nothing.
func TestSessionStatePutOnlyForTheLeasesOwnDomain(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a", withMaxLeases(2))})
	withDomain, err := s.Acquire(ctx, AcquireRequest{Holder: "h", Owner: "mallory", Namespace: testNamespace, Session: "s", Domain: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	noDomain, err := s.Acquire(ctx, AcquireRequest{Holder: "h", Owner: "mallory", Namespace: testNamespace, Session: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	var field *FieldError
	for _, tc := range []struct{ session, domain string }{{"s", "bank.example"}, {"bare", "bank.example"}, {"bare", ""}} {
		if err := s.PutSessionStateAs("mallory", testNamespace, tc.session, tc.domain, []byte("planted")); !errors.As(err, &field) || field.Field != "domain" {
			t.Errorf("session %s, domain %q: %v, want a FieldError on domain", tc.session, tc.domain, err)
		}
	}
	if err := s.PutSessionStateAs("mallory", testNamespace, "s", "", []byte("own")); err != nil {
		t.Errorf("the lease's own domain: %v", err)
	}
	for _, l := range []Lease{withDomain, noDomain} {
		if err := s.ReleaseAs("mallory", l.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
	}
	for owner, want := range map[string][]byte{"mallory": nil, "victim": nil} {
		if got := stateFor(t, s, owner, "bank.example"); !bytes.Equal(got, want) {
			t.Errorf("%s on bank.example got %q, want none", owner, got)
		}
	}
	if got := stateFor(t, s, "mallory", "shop.example"); string(got) != "own" {
		t.Errorf("mallory on shop.example got %q, want %q", got, "own")
	}
}

// TestStateCapCountsWhatTheHeapHolds: what the cap charges an entry is
// within 1.5x of what the heap grows by for it, for small and large
// states and for the longest domains.
func TestStateCapCountsWhatTheHeapHolds(t *testing.T) {
	for name, tc := range map[string]struct {
		entries, blob int
		domain        func(i int) string
	}{
		"1 B state":       {10_000, 1, func(i int) string { return fmt.Sprintf("d%d.example.com", i) }},
		"1 KiB state":     {10_000, 1 << 10, func(i int) string { return fmt.Sprintf("d%d.example.com", i) }},
		"253-byte domain": {10_000, 1, func(i int) string { return fmt.Sprintf("%0241d.example.com", i) }},
		"64 KiB state":    {500, MaxStateSize, func(i int) string { return fmt.Sprintf("d%d.example.com", i) }},
	} {
		t.Run(name, func(t *testing.T) {
			s, _, _ := newTestStore(t, []ProxyInfo{newProxy("a")}, withStoreConfig(func(c *Config) {
				c.MaxStateBytes, c.MaxStateEntries, c.MaxStateBytesPerOwner = 1<<40, tc.entries, 1<<40
			}))
			blob := make([]byte, tc.blob)
			before := liveHeapBytes()
			for i := range tc.entries {
				keepState(t, s, "crawler", tc.domain(i), blob)
			}
			grown := float64(liveHeapBytes()) - float64(before)
			charged := float64(s.StateBytes())
			if r := grown / charged; r < 1/1.5 || r > 1.5 {
				t.Errorf("%d entries: the heap grew %.0f bytes, the cap charged %.0f: ratio %.2f, want within 1.5x", s.StateEntries(), grown, charged, r)
			}
			runtime.KeepAlive(s)
		})
	}
}

// liveHeapBytes is the heap in use after a collection.
func liveHeapBytes() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
