package forwardproxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// BenchmarkExitAddr is the choice of a session's exit address: the seed
// (one SHA-256) and the address within a /64.
func BenchmarkExitAddr(b *testing.B) {
	ranges := prefixes("fd00:5e55:1::/64", "198.51.100.0/24")
	target := netip.MustParseAddr("2606:4700::1111")
	sessions := make([]string, 1024)
	for i := range sessions {
		sessions[i] = "member-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := forwardproxy.ExitAddr(ranges, target, forwardproxy.SessionSeed(sessions[i%len(sessions)])); !ok {
			b.Fatal("no address")
		}
		i++
	}
}

// BenchmarkConnectRanged opens CONNECT tunnels on loopback through an
// unranged proxy and through a ranged one (the address chosen per
// session, then dialled without binding it: loopback cannot carry the
// range), one fresh client connection each.
func BenchmarkConnectRanged(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := ln.Addr().String()
	var nd net.Dialer
	plainDial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nd.DialContext(ctx, network, addr)
	}
	for _, bc := range []struct {
		name   string
		ranges []netip.Prefix
	}{{"unranged", nil}, {"ranged", prefixes("fd00:5e55:1::/64", "198.51.100.0/24")}} {
		b.Run(bc.name, func(b *testing.B) {
			p := proxytest.StartInProcess(b, proxytest.Options{Username: "crawler", Password: "pw", Verbosity: -1, Configure: func(c *forwardproxy.Config) {
				c.ExitRanges = bc.ranges
				c.DialContext = plainDial
			}})
			auth := "Proxy-Authorization: " + basic("crawler+session-bench", "pw") + "\r\n"
			req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + auth + "\r\n"
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp", p.Addr)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.WriteString(c, req)
				resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("CONNECT: %v %v", resp, err)
				}
				c.Close()
			}
		})
	}
}
