package gatewaytier

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestGatewayTier: one session through two gateways leaves through one
// upstream; the leader killed with SIGKILL while 32 tunnels stream cuts
// none, and the session keeps its upstream; a gateway stopped with SIGTERM
// goes unready first, lets its tunnels finish, releases its rotating leases
// and exits 0, and the session goes on through the other.
func TestGatewayTier(t *testing.T) {
	s := startTier(t)
	ctx := t.Context()
	gw0, gw1 := s.gateways[0].LeaseAddr, s.gateways[1].LeaseAddr
	session := "ns-" + s.ns + "+session-s"
	rotating := "ns-" + s.ns

	// One session through both gateways: one lease, one upstream.
	checkStreams(t, "session on both gateways", s.startStreams(t, []string{gw0 + "|" + session, gw1 + "|" + session}, 1, 0)(), 1)
	upstream, err := s.sessionUpstream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session s leaves through %s", upstream)

	// 32 tunnels (half of them the session's, half rotating, on both
	// gateways) stream for about 15 s; the leader dies in the middle.
	const chunks, every = 60, 250 * time.Millisecond
	var specs []string
	for i := range 32 {
		gw, user := []string{gw0, gw1}[i%2], []string{session, rotating}[i/2%2]
		specs = append(specs, gw+"|"+user)
	}
	wait := s.startStreams(t, specs, chunks, every)
	poll(t, "32 tunnels streaming", 20*time.Second, func() error {
		if n := s.target.active.Load(); n != 32 {
			return fmt.Errorf("%d streaming", n)
		}
		return nil
	})
	s.operators[0].Kill()
	t.Log("leader killed with SIGKILL")
	poll(t, "operator-1 leads", 30*time.Second, func() error { return s.leading(ctx, s.operators[1]) })
	checkStreams(t, "leader killed mid-stream", wait(), chunks)
	// New connections of the session reach its upstream on the new leader.
	checkStreams(t, "session after the failover", s.startStreams(t, []string{gw1 + "|" + session, gw0 + "|" + session}, 1, 0)(), 1)
	if got, err := s.sessionUpstream(ctx, "s"); err != nil || got != upstream {
		t.Errorf("after the failover session s leaves through %q (%v), want %s", got, err, upstream)
	}

	// A new leader after a crash grants nothing new until the old leader's
	// leases have expired (docs/api.md, Leader changes): rotating
	// connections get 503 Recovering with Retry-After until then.
	poll(t, "the new leader grants again", 60*time.Second, func() error {
		st := s.startStreams(t, []string{gw1 + "|" + rotating}, 1, 0)()[0]
		if st.exitErr != nil {
			return fmt.Errorf("%v %s", st.exitErr, st.stderr)
		}
		return nil
	})

	// SIGTERM to gateway-0 while 8 tunnels stream through it.
	const drainChunks = 24
	specs = nil
	for i := range 8 {
		specs = append(specs, gw0+"|"+[]string{session, rotating}[i%2])
	}
	wait = s.startStreams(t, specs, drainChunks, every)
	poll(t, "8 tunnels streaming through gateway-0", 20*time.Second, func() error {
		if n := s.target.active.Load(); n != 8 {
			return fmt.Errorf("%d streaming", n)
		}
		return nil
	})
	s.gateways[0].Signal(t, syscall.SIGTERM)
	poll(t, "gateway-0 unready while it drains", 5*time.Second, func() error {
		if status, _, err := s.gateways[0].Get(ctx, "/readyz"); err != nil || status != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz: %d %v", status, err)
		}
		if n := s.target.active.Load(); n == 0 {
			return fmt.Errorf("the tunnels ended before readiness went false")
		}
		return nil
	})
	checkStreams(t, "gateway SIGTERM mid-stream", wait(), drainChunks)
	if code := s.gateways[0].WaitExit(t, 30*time.Second); code != 0 {
		t.Errorf("gateway-0 exited %d after SIGTERM, want 0", code)
	}
	// A release may still be in flight when the process has exited; a
	// lease left unreleased would live out its 10 s TTL.
	poll(t, "gateway-0's rotating leases released after it drained", 3*time.Second, func() error {
		ls, err := s.leases(ctx)
		if err != nil {
			return err
		}
		var live []string
		for _, l := range ls {
			if l.Session == "" {
				live = append(live, fmt.Sprintf("%s on %s granted %s expires %s", l.Holder, l.Proxy.Name,
					l.GrantedAt.Format(time.StampMilli), l.ExpiresAt.Format(time.StampMilli)))
			}
		}
		if len(live) > 0 {
			return fmt.Errorf("%d rotating leases live at %s: %v", len(live), time.Now().Format(time.StampMilli), live)
		}
		return nil
	})
	// Its clients reconnect through the other gateway and keep the session.
	checkStreams(t, "session through the remaining gateway", s.startStreams(t, []string{gw1 + "|" + session}, 1, 0)(), 1)
	if got, err := s.sessionUpstream(ctx, "s"); err != nil || got != upstream {
		t.Errorf("after gateway-0 stopped session s leaves through %q (%v), want %s", got, err, upstream)
	}
}
