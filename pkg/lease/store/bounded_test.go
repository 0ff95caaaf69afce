package store

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Sessions and cool-downs are bounded, with an eviction rule and a metric
// (issue 20, point 8): after many more than the caps, the store keeps
// exactly the caps, its orders and counts agree with what it keeps, and
// the newest session is remembered, the oldest forgotten. (The same over
// the API: pkg/lease/server's TestAbuseStateIsBounded.)
func TestSessionsAndCooldownsAreBounded(t *testing.T) {
	const limit, cycles, owner = 50, 1000, "crawler"
	s, _, m := newTestStore(t, []ProxyInfo{newProxy("p1", withLatency(10)), newProxy("p2", withLatency(20))},
		withStoreConfig(func(c *Config) { c.MaxSessions, c.MaxCooldowns = limit, limit }))
	for i := range cycles {
		l := acquire(t, s, AcquireRequest{Holder: "w", Owner: owner, Namespace: testNamespace,
			Session: fmt.Sprintf("s%d", i), Domain: fmt.Sprintf("d%d.example", i)})
		if err := s.ReleaseAs(owner, l.ID, OutcomeBanned, "", Report{}); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	s.mu.Lock()
	sessions, lru, cooldowns := len(s.st.sessions.byKey), s.st.sessions.lru.Len(), len(s.st.cooldowns.heap)
	var perProxy, inForce int
	for _, pc := range s.st.cooldowns.byProxy {
		perProxy += len(pc.byDomain)
		inForce += pc.inForce
	}
	storeInForce := s.st.cooldowns.inForce
	s.mu.Unlock()
	if sessions != limit || lru != limit || cooldowns != limit || perProxy != limit {
		t.Errorf("kept %d sessions (%d in order), %d cool-downs (%d on proxies), want %d each", sessions, lru, cooldowns, perProxy, limit)
	}
	if inForce != storeInForce {
		t.Errorf("cool-downs in force: %d on the proxies, %d in the store", inForce, storeInForce)
	}
	snap := m.Snapshot()
	want := map[string]int{StateSessions: cycles - limit, StateCooldowns: cycles - limit}
	if diff := cmp.Diff(want, snap.Evictions); diff != "" {
		t.Errorf("evictions (-want +got):\n%s", diff)
	}
	// Each ban was another site (sitebans.go): 1,000 sites, within its
	// per-namespace cap.
	if diff := cmp.Diff(map[string]int{StateSessions: limit, StateCooldowns: limit, StateSiteBans: cycles}, snap.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// The newest session is remembered; the oldest forgotten.
	last := acquire(t, s, AcquireRequest{Holder: "w", Owner: owner, Namespace: testNamespace, Session: fmt.Sprintf("s%d", cycles-1)})
	if err := s.ReleaseAs(owner, last.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	_, newest := s.st.sessions.byKey[sessionKey{owner, testNamespace, fmt.Sprintf("s%d", cycles-1)}]
	_, oldest := s.st.sessions.byKey[sessionKey{owner, testNamespace, "s0"}]
	s.mu.Unlock()
	if !newest || oldest {
		t.Errorf("newest session kept: %v, oldest kept: %v; want true, false", newest, oldest)
	}
}
