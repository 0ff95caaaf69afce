package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestRotatingReleasesRideOnTheNextAcquire: with a give-back wait, each
// rotating request's lease is given back by the caller's next acquire
// (counted as a release, its bytes reported), so a crawler's sequence
// holds one lease at a time; the last, which no acquire took, is
// released on its own once its wait is over.
func TestRotatingReleasesRideOnTheNextAcquire(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	u := startUnitWith(t, unitOptions{gateway: func(c *gateway.Config) { c.GiveBackWait = time.Second }}, "a", "b")
	held := func() int {
		t.Helper()
		ls, err := u.store.List(store.LeaseFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(ls)
	}
	pool := store.ObjectName{Namespace: "crawl", Name: "p"}
	for i := range 3 {
		if code, _ := u.get(t, "ns-crawl", target.URL); code >= http.StatusInternalServerError { // the target's own answer, whatever it is
			t.Fatalf("request %d: %d", i, code)
		}
		if err := proxytest.Poll(5*time.Second, func() bool { return u.gw.RotatingInFlight() == 0 }); err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 1 {
			t.Fatalf("after request %d the store holds %d leases, want 1 (the last, parked)", i, n)
		}
	}
	got := u.store.PoolOutcomes(pool)
	if got.OK != 2 {
		t.Errorf("after 3 requests the pool counted %+v, want 2 ok (given back by the next acquires)", got)
	}
	u.clock.Step(2 * time.Second) // past the wait: the parked lease goes on its own
	if err := proxytest.Poll(5*time.Second, func() bool { return held() == 0 }); err != nil {
		t.Fatalf("the parked lease was not released after its wait: %d held", held())
	}
	got = u.store.PoolOutcomes(pool)
	if diff := cmp.Diff(store.Outcomes{OK: 3}, store.Outcomes{OK: got.OK, Banned: got.Banned, Error: got.Error}); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if got.TransferredBytes == 0 {
		t.Errorf("no transferred bytes counted: %+v", got)
	}
}

// TestSessionRequestsCountAsOutcomes: a sticky session keeps one lease for
// many requests; each request that went well counts an ok outcome, and
// its bytes, with the lease's next renewal, and what is left with the
// last renewal when the idle session is dropped.
func TestSessionRequestsCountAsOutcomes(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	u := startUnit(t, "a")
	pool := store.ObjectName{Namespace: "crawl", Name: "p"}
	get := func() {
		t.Helper()
		u.get(t, "ns-crawl+session-s1", target.URL)
		// The relay leaves its session (and counts its request) just
		// after the client has read the answer.
		if err := proxytest.Poll(5*time.Second, func() bool { return u.gw.OpenSessionConnections() == 0 }); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		get()
	}
	if got := u.store.PoolOutcomes(pool); got.OK != 0 {
		t.Fatalf("before any renewal the pool counted %+v", got)
	}
	u.clock.Step(20 * time.Second) // past half of the 30 s TTL: the janitor renews
	u.gw.Tidy(t.Context())
	if got := u.store.PoolOutcomes(pool); got.OK != 3 || got.TransferredBytes == 0 {
		t.Errorf("after the renewal the pool counted %+v, want 3 ok and their bytes", got)
	}
	get()
	u.clock.Step(2 * time.Minute) // idle: the session is dropped, its last request reported
	u.gw.Tidy(t.Context())
	if got := u.store.PoolOutcomes(pool); got.OK != 4 {
		t.Errorf("after the idle session was dropped the pool counted %+v, want 4 ok", got)
	}
}
