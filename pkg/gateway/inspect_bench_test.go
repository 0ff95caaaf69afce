package gateway_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// BenchmarkInspectedAgainstTunnelled: HTTPS GETs through the same gateway
// and the same in-process forward-proxy, each on a new connection (a new
// CONNECT and a rotating lease), to a loopback TLS site: tunnelled (the
// namespace did not opt in: one TLS handshake, crawler to site) beside
// inspected (two: crawler to the gateway's leaf, gateway to the site).
// Issue 50 asks inspected at least 0.5x tunnelled; make bench prints both.
func BenchmarkInspectedAgainstTunnelled(b *testing.B) {
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<html><body>a page</body></html>")
	}))
	defer site.Close()
	ca := newCA(b)
	minter, err := inspection.NewMinter(ca, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	u := startUnitWith(b, unitOptions{quiet: true, gateway: func(c *gateway.Config) {
		c.Inspection = fixedMinter{"crawl": minter}
		c.TargetRootCAs = pool(site.Certificate())
		c.InspectedPorts = []string{port(site.URL)}
		c.Wait = 10 * time.Second
	}, maxLeases: 64}, "a") // slots enough that no request waits for another's release
	// The same upstream either way: a caller without an ns- term names no
	// namespace and is never inspected.
	for _, tc := range []struct {
		name, username string
		roots          *tls.Config
	}{
		{"tunnelled", "pool-p", &tls.Config{RootCAs: pool(site.Certificate())}},
		{"inspected", "ns-crawl+pool-p", &tls.Config{RootCAs: pool(ca.Cert)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			proxy := &url.URL{Scheme: "http", Host: u.addr, User: url.UserPassword(tc.username, "ignored")}
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
				Proxy: http.ProxyURL(proxy), DisableKeepAlives: true, TLSClientConfig: tc.roots,
			}}
			for b.Loop() {
				resp, err := c.Get(site.URL + "/page")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// fixedMinter inspects the namespaces it has a Minter for, with that one
// Minter (and its leaf cache), as a gateway replica does.
type fixedMinter map[string]*inspection.Minter

func (m fixedMinter) Minter(namespace string) *inspection.Minter { return m[namespace] }
