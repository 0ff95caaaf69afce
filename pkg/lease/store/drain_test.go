package store

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A draining proxy keeps its live lease renewing, grants no new one (not
// even to the session that held it), and counts its leases for the pool.
func TestDrainingProxyKeepsLeasesAndGrantsNone(t *testing.T) {
	a := newProxy("a", withMaxLeases(2))
	s, _, _ := newTestStore(t, []ProxyInfo{a})
	held := acquire(t, s, AcquireRequest{Session: "s1"})

	a.Draining = true
	s.Upsert(a)

	renewed, err := s.RenewAs("", held.ID, 0, Report{})
	if err != nil {
		t.Fatalf("renewing a lease on a draining proxy: %v", err)
	}
	_, err = s.Acquire(t.Context(), AcquireRequest{Holder: "w", Session: "s1"})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) {
		t.Fatalf("acquire on a draining proxy: got %v, want UnavailableError", err)
	}
	counts, err := LeasesByProxy(s, testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"a": 1}, counts); diff != "" {
		t.Errorf("LeasesByProxy (-want +got):\n%s", diff)
	}
	release(t, s, renewed)
	if counts, _ := LeasesByProxy(s, testNamespace); len(counts) != 0 {
		t.Errorf("after release: %v, want none", counts)
	}
}
