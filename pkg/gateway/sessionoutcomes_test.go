package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestSessionRequestsCountAsOutcomes: a sticky session keeps one lease for
// many requests; each request that went well counts an ok outcome, and
// its bytes, with the lease's next renewal, and what is left with the
// last renewal when the idle session is dropped.
func TestSessionRequestsCountAsOutcomes(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	u := startUnit(t, "a")
	for range 3 {
		u.get(t, "ns-crawl+session-s1", target.URL)
	}
	waitConnectionsLeft(t, u)
	if got := u.api.PoolOutcomes("crawl", "p"); got.OK != 0 {
		t.Fatalf("before any renewal the pool counted %+v", got)
	}
	u.clock.Step(20 * time.Second) // past half of the 30 s TTL: the janitor renews
	u.gw.Tidy(t.Context())
	if got := u.api.PoolOutcomes("crawl", "p"); got.OK != 3 || got.TransferredBytes == 0 {
		t.Errorf("after the renewal the pool counted %+v, want 3 ok and their bytes", got)
	}
	u.get(t, "ns-crawl+session-s1", target.URL)
	waitConnectionsLeft(t, u)
	// Idle past the 60 s session idle, tidied every 10 s as the janitor
	// does: renewals keep the lease live until the session is dropped, so
	// its release carries the last request (a report on an ended lease
	// counts nothing, docs/decisions/0371).
	for range 8 {
		u.clock.Step(10 * time.Second)
		u.gw.Tidy(t.Context())
	}
	if got := u.api.PoolOutcomes("crawl", "p"); got.OK != 4 {
		t.Errorf("after the idle session was dropped the pool counted %+v, want 4 ok", got)
	}
}

// waitConnectionsLeft waits until every connection has left its session:
// a request counts as ok when its relay ends, which may come after the
// client has read the whole answer.
func waitConnectionsLeft(t *testing.T, u *unit) {
	t.Helper()
	eventually.Check(t, 10*time.Second, 10*time.Millisecond, "the connections leaving their session", func(context.Context) error {
		if n := u.gw.OpenSessionConnections(); n != 0 {
			return fmt.Errorf("%d connections open", n)
		}
		return nil
	})
}
