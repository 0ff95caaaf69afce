package forwardproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

type sessionKey struct{}
type sourceKey struct{}

// withSession records the username's session id for the dial.
func withSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, sessionKey{}, session)
}

func sessionFrom(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}

// DialSource returns the exit address the Server chose for the dial whose
// context is ctx (valid only with [Config.ExitRanges]); a custom
// [Config.DialContext] binds it.
func DialSource(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(sourceKey{}).(netip.Addr)
	return a, ok
}

// exitSeedFor is the seed of a connection: its session's, or fresh random
// bits without one.
func exitSeedFor(ctx context.Context) ExitSeed {
	if s := sessionFrom(ctx); s != "" {
		return SessionSeed(s)
	}
	return randomSeed()
}

// NoExitFamilyError is a target none of whose addresses is of the family of
// an exit range (an IPv4-only name behind IPv6 exit ranges).
type NoExitFamilyError struct {
	Host   string
	Ranges []netip.Prefix
}

func (e *NoExitFamilyError) Error() string {
	want := "IPv6 (AAAA)"
	if e.Ranges[0].Addr().Is4() {
		want = "IPv4 (A)"
	}
	parts := make([]string, len(e.Ranges))
	for i, r := range e.Ranges {
		parts[i] = r.String()
	}
	return fmt.Sprintf("%s has no %s address, the family of the exit ranges %s", e.Host, want, strings.Join(parts, ","))
}

// exitFamilies keeps the addresses of ips that an exit range can dial from.
// Pure.
func exitFamilies(ips []netip.Addr, ranges []netip.Prefix) []netip.Addr {
	var v4, v6 bool
	for _, r := range ranges {
		v4 = v4 || r.Addr().Is4()
		v6 = v6 || r.Addr().Is6()
	}
	var out []netip.Addr
	for _, ip := range ips {
		if is4 := ip.Unmap().Is4(); (is4 && v4) || (!is4 && v6) {
			out = append(out, ip)
		}
	}
	return out
}

// exitDialer is the default DialContext with exit ranges: it binds the
// address the Server chose (DialSource) with freebind, so that any address
// of a prefix routed to the host works without being configured on an
// interface, and checks the egress guard on the socket as the plain
// dialer does.
func exitDialer(egress EgressPolicy) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		d := &net.Dialer{KeepAlive: 30 * time.Second, Control: func(network, address string, c syscall.RawConn) error {
			if err := setFreebind(network, c); err != nil {
				return err
			}
			return egress.control(network, address, c)
		}}
		if src, ok := DialSource(ctx); ok {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		return d.DialContext(ctx, network, address)
	}
}
