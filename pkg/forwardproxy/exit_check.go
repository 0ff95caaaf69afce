package forwardproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// ExitRouteCheckTimeout bounds CheckExitRanges's dial of one range: a
// local address answers at once, a missing route times out.
const ExitRouteCheckTimeout = time.Second

// CheckExitRanges tells, at start-up, whether the host takes every range as
// local, as replies to exit addresses need (docs/ipv6.md): for each range
// it listens on a random address of it (with freebind) and dials that
// address. Without `ip route add local RANGE dev lo` the dial goes out
// instead and fails or times out, and the error names the command that
// fixes it, rather than every later connection ending in a 504.
func CheckExitRanges(ctx context.Context, ranges []netip.Prefix) error {
	for _, r := range ranges {
		a, _ := ExitAddr([]netip.Prefix{r}, r.Addr(), randomSeed())
		if err := selfDial(ctx, a); err != nil {
			family := "-6 "
			if r.Addr().Is4() {
				family = ""
			}
			return fmt.Errorf("exit range %s is not local to this host (%v): run `ip %sroute add local %s dev lo` (docs/ipv6.md)", r, err, family, r)
		}
	}
	return nil
}

// selfDial listens on a and connects to it.
func selfDial(ctx context.Context, a netip.Addr) error {
	lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error { return setFreebind(network, c) }}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(a.String(), "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: ExitRouteCheckTimeout}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	return c.Close()
}
