package gatewayintegration

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestEveryErrorWithItsStatusAndMessage drives each refusal of the gateway
// with curl, plain and CONNECT, and Python requests.
func TestEveryErrorWithItsStatusAndMessage(t *testing.T) {
	h := startHarness(t, "gw-errors", harnessOptions{})
	ups := h.fleet(t, "live", 1, false)
	token := h.crawler(t, "crawler", true)
	stranger := h.crawler(t, "stranger", false)
	target := startTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t)

	// Two proxies whose addresses refuse connections, and a pool where one
	// of those comes first (lower latency) before a live one.
	dead0 := &proxytest.Proxy{Impl: "closed", Addr: proxytest.ClosedAddr(t)}
	dead1 := &proxytest.Proxy{Impl: "closed", Addr: proxytest.ClosedAddr(t)}
	h.addUpstream(t, "dead-0", "dead", dead0, "", "", 1)
	h.addUpstream(t, "dead-1", "dead", dead1, "", "", 2)
	deadFirst := &proxytest.Proxy{Impl: "closed", Addr: proxytest.ClosedAddr(t)}
	h.addUpstream(t, "mixed-dead", "mixed", deadFirst, "", "", 1)
	liveSecond := proxytest.StartTinyproxy(t, proxytest.Options{Username: upstreamUser, Password: "mixed-secret"})
	ups = append(ups, h.addUpstream(t, "mixed-live", "mixed", liveSecond, upstreamUser, "mixed-secret", 50))

	gw := h.gatewayAddr
	tests := map[string]struct {
		proxy       string
		wantStatus  int
		wantMessage string
		wantHeader  string
	}{
		"unknown key": {
			proxy: h.gatewayURL("ns-gw-errors+colour-blue", token), wantStatus: http.StatusBadRequest,
			wantMessage: `username term "colour-blue": unknown key "colour"`,
		},
		"malformed term": {
			proxy: h.gatewayURL("ns-gw-errors+session", token), wantStatus: http.StatusBadRequest,
			wantMessage: `username term "session": is not key-value`,
		},
		"bad namespace": {
			proxy: h.gatewayURL("ns-Not_A_Namespace", token), wantStatus: http.StatusBadRequest,
			wantMessage: `username term "ns-Not_A_Namespace": is not a namespace name`,
		},
		"no credentials": {
			proxy: "http://" + gw, wantStatus: http.StatusProxyAuthRequired,
			wantMessage: "credentials are required", wantHeader: `Proxy-Authenticate: Basic realm="proxy-operator gateway"`,
		},
		"garbage token": {
			proxy: h.gatewayURL("ns-gw-errors", "garbage"), wantStatus: http.StatusProxyAuthRequired,
			wantMessage: "the password must be a valid bearer token", wantHeader: "Proxy-Authenticate: Basic",
		},
		"no permission": {
			proxy: h.gatewayURL("ns-gw-errors", stranger), wantStatus: http.StatusForbidden,
			wantMessage: `user "system:serviceaccount:gw-errors:stranger" may not create proxies/leases (crawl.proxyfleet.io) in namespace gw-errors`,
		},
		"no namespace, no cluster-wide permission": {
			proxy: h.gatewayURL("pool-live", token), wantStatus: http.StatusForbidden,
			wantMessage: "across all namespaces (add an ns- term to the username)",
		},
		"nothing in the pool": {
			proxy: h.gatewayURL("ns-gw-errors+pool-empty", token), wantStatus: http.StatusServiceUnavailable,
			wantMessage: "no matching Ready proxy has free capacity", wantHeader: "Retry-After: 1",
		},
		"every upstream refuses": {
			proxy: h.gatewayURL("ns-gw-errors+pool-dead", token), wantStatus: http.StatusBadGateway,
			wantMessage: "the upstream refused the tunnel (and so did the next one tried)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plain := curl(t, tc.proxy, target.URL+"/echo?m="+strings.ReplaceAll(name, " ", "-"))
			wantPlain := tc.wantMessage
			if tc.wantStatus == http.StatusBadGateway {
				wantPlain = "the upstream failed the request"
			}
			if plain.status != tc.wantStatus || !strings.Contains(plain.body, wantPlain) {
				t.Errorf("curl, plain: %d %q; want %d containing %q", plain.status, plain.body, tc.wantStatus, wantPlain)
			}
			tunnel := curl(t, tc.proxy, httpsTarget.URL+"/echo", "--cacert", caFile(t, httpsTarget))
			if tunnel.connect != tc.wantStatus {
				t.Errorf("curl, CONNECT: answered %d, want %d\n%s", tunnel.connect, tc.wantStatus, tunnel.verbose)
			}
			for _, r := range []curlResult{plain, tunnel} {
				if tc.wantHeader != "" && !strings.Contains(r.verbose, tc.wantHeader) {
					t.Errorf("curl: no %q header in\n%s", tc.wantHeader, r.verbose)
				}
				if !strings.Contains(r.verbose, "Proxy-Status: proxy-operator-gateway") {
					t.Errorf("curl: no Proxy-Status header in\n%s", r.verbose)
				}
			}
			py := pyRequests(t, pyJob{Proxy: tc.proxy, URLs: []string{target.URL + "/echo", httpsTarget.URL + "/echo"}})[0]
			if py[0].Status != tc.wantStatus || !strings.Contains(py[0].Text, wantPlain) {
				t.Errorf("requests, plain: %+v; want %d containing %q", py[0], tc.wantStatus, wantPlain)
			}
			if !strings.Contains(py[1].Error, "Tunnel connection failed: "+strconv.Itoa(tc.wantStatus)) {
				t.Errorf("requests, CONNECT: %+v; want a ProxyError naming %d", py[1], tc.wantStatus)
			}
			h.noCredentials(t, ups, plain.body, plain.verbose, tunnel.body, tunnel.verbose, py[0].Text, py[1].Error)
		})
	}

	t.Run("the first upstream refuses, the next one serves", func(t *testing.T) {
		proxy := h.gatewayURL("ns-gw-errors+pool-mixed", token)
		for _, url := range []string{target.URL + "/echo?m=mixed", httpsTarget.URL + "/echo"} {
			if r := curl(t, proxy, url, "--cacert", caFile(t, httpsTarget)); r.status != http.StatusOK {
				t.Errorf("curl %s: %d %q", url, r.status, r.body)
			}
		}
		if !strings.Contains(h.logs.String(), `"Upstream refused CONNECT; releasing it with outcome error" proxy="gw-errors/mixed-dead"`) {
			t.Errorf("the logs do not show mixed-dead refused and released with outcome error")
		}
	})
	poll(t, "refused and finished leases all released", func() bool { return len(h.gatewayLeases(t)) == 0 })
}

// TestAuthPathOnTheRealAPIServer: the crawler Role of artifacts/rbac lets a
// ServiceAccount through; without it, 403; a garbage token, 407.
func TestAuthPathOnTheRealAPIServer(t *testing.T) {
	h := startHarness(t, "gw-auth", harnessOptions{})
	ups := h.fleet(t, "auth", 1, false)
	allowed := h.crawler(t, "allowed", true)
	denied := h.crawler(t, "denied", false)
	target := startTarget(t)
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"ServiceAccount with the crawler Role": {token: allowed, want: http.StatusOK},
		"ServiceAccount without it":            {token: denied, want: http.StatusForbidden},
		"garbage":                              {token: "eyJhbGciOiJSUzI1NiJ9.garbage.garbage", want: http.StatusProxyAuthRequired},
	} {
		t.Run(name, func(t *testing.T) {
			proxy := h.gatewayURL("ns-gw-auth+pool-auth", tc.token)
			if r := curl(t, proxy, target.URL+"/echo"); r.status != tc.want {
				t.Errorf("curl: %d %q, want %d", r.status, r.body, tc.want)
			}
			if py := pyRequests(t, pyJob{Proxy: proxy, URLs: []string{target.URL + "/echo"}})[0][0]; py.Status != tc.want {
				t.Errorf("requests: %+v, want %d", py, tc.want)
			}
		})
	}
	h.noCredentials(t, ups)
}
