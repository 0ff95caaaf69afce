package proxytest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }

const (
	user = "crawler"
	pass = "s3cret-pass"
)

// outcome is what a client can observe of one proxied fetch, reduced to
// what every conforming proxy must agree on.
type outcome struct {
	// Connect is the CONNECT response status ("" for http targets).
	Connect string
	// Status is the final response status ("" when there was none).
	Status string
	// ProxyAuth is the auth scheme the proxy asked for in
	// Proxy-Authenticate (the realm is the implementation's choice).
	ProxyAuth string
	// Via and ProxyAuthorization report, for /echo over plain HTTP, whether
	// the target received those headers.
	Via, ProxyAuthorization bool
}

// status formats a code exactly, or as its class ("5xx") when only the
// class is specified.
func status(code int, classOnly bool) string {
	switch {
	case code == 0:
		return ""
	case classOnly:
		return strconv.Itoa(code/100) + "xx"
	}
	return strconv.Itoa(code)
}

func authScheme(h http.Header) string {
	scheme, _, _ := strings.Cut(h.Get("Proxy-Authenticate"), " ")
	return scheme
}

// TestClientConformance runs one client table against forward-proxy
// (in-process and binary) and tinyproxy.
func TestClientConformance(t *testing.T) {
	httpTarget := proxytest.StartHTTPTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t)
	roots := proxytest.RootCAs(httpsTarget)
	down := proxytest.ClosedAddr(t)
	targets := map[string]string{
		"http":       httpTarget.URL,
		"https":      httpsTarget.URL,
		"http-down":  "http://" + down,
		"https-down": "https://" + down,
	}
	connectPorts := []int{proxytest.Port(t, httpsTarget.Listener.Addr().String()), proxytest.Port(t, down)}

	type creds struct{ user, pass string }
	tests := map[string]struct {
		auth      bool   // the proxy requires basic auth
		creds     *creds // what the client sends
		target    string // key of targets
		path      string
		classOnly bool // compare status classes (5xx), not codes
		want      outcome
		// quirks overrides want for implementations that knowingly differ.
		quirks map[string]outcome
	}{
		"http GET": {
			target: "http", path: "/generate_204",
			want: outcome{Status: "204"},
		},
		"http echo: Via added": {
			target: "http", path: "/echo",
			want: outcome{Status: "200", Via: true},
		},
		"https CONNECT then TLS GET": {
			target: "https", path: "/generate_204",
			want: outcome{Connect: "200", Status: "204"},
		},
		"http auth missing": {
			auth: true, target: "http", path: "/generate_204",
			want: outcome{Status: "407", ProxyAuth: "Basic"},
		},
		"https auth missing": {
			auth: true, target: "https", path: "/generate_204",
			want: outcome{Connect: "407", ProxyAuth: "Basic"},
		},
		"http auth accepted": {
			auth: true, creds: &creds{user, pass}, target: "http", path: "/generate_204",
			want: outcome{Status: "204"},
		},
		"http auth accepted: credentials not forwarded": {
			auth: true, creds: &creds{user, pass}, target: "http", path: "/echo",
			want: outcome{Status: "200", Via: true},
		},
		"https auth accepted": {
			auth: true, creds: &creds{user, pass}, target: "https", path: "/generate_204",
			want: outcome{Connect: "200", Status: "204"},
		},
		// Wrong credentials: RFC 9110 §15.5.8 wants a 407 with a fresh
		// challenge. tinyproxy (reqs.c, label e401) answers 401 Unauthorized
		// without Proxy-Authenticate, which a client cannot tell from an
		// origin's 401; forward-proxy answers 407.
		"http wrong password": {
			auth: true, creds: &creds{user, "wrong"}, target: "http", path: "/generate_204",
			want:   outcome{Status: "407", ProxyAuth: "Basic"},
			quirks: map[string]outcome{"tinyproxy": {Status: "401"}},
		},
		"https wrong password": {
			auth: true, creds: &creds{user, "wrong"}, target: "https", path: "/generate_204",
			want:   outcome{Connect: "407", ProxyAuth: "Basic"},
			quirks: map[string]outcome{"tinyproxy": {Connect: "401"}},
		},
		"http wrong username": {
			auth: true, creds: &creds{"someone", pass}, target: "http", path: "/generate_204",
			want:   outcome{Status: "407", ProxyAuth: "Basic"},
			quirks: map[string]outcome{"tinyproxy": {Status: "401"}},
		},
		// forward-proxy answers 502, tinyproxy 500 "Unable to connect":
		// both are a server error, which is what clients act on.
		"http target down": {
			target: "http-down", path: "/generate_204", classOnly: true,
			want: outcome{Status: "5xx"},
		},
		"https target down": {
			target: "https-down", path: "/generate_204", classOnly: true,
			want: outcome{Connect: "5xx"},
		},
	}

	for _, impl := range proxytest.Impls() {
		t.Run(impl.Name, func(t *testing.T) {
			open := impl.Start(t, proxytest.Options{ConnectPorts: connectPorts})
			authed := impl.Start(t, proxytest.Options{Username: user, Password: pass, ConnectPorts: connectPorts})
			for name, tc := range tests {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					p := open
					if tc.auth {
						p = authed
					}
					proxyURL := p.URL()
					if tc.creds != nil {
						proxyURL = p.URLWithAuth(tc.creds.user, tc.creds.pass)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					target := targets[tc.target] + tc.path
					res, err := proxytest.Fetch(ctx, proxyURL, target, roots)
					if err != nil {
						t.Logf("GET %s through %s: %v", target, p.Impl, err)
					}
					got := outcome{
						Connect: status(res.ConnectStatus, tc.classOnly),
						Status:  status(res.Status, tc.classOnly),
					}
					if got.ProxyAuth = authScheme(res.ConnectHeader); got.ProxyAuth == "" {
						got.ProxyAuth = authScheme(res.Header)
					}
					if tc.path == "/echo" && res.Status == http.StatusOK {
						var echo proxytest.Echo
						if err := json.Unmarshal(res.Body, &echo); err != nil {
							t.Fatalf("decoding /echo: %v\n%s", err, res.Body)
						}
						got.Via = echo.Header.Get("Via") != ""
						got.ProxyAuthorization = echo.Header.Get("Proxy-Authorization") != ""
					}
					want := tc.want
					if q, ok := tc.quirks[p.Impl]; ok {
						want = q
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("GET %s through %s (-want +got):\n%s", target, redact(proxyURL), diff)
					}
				})
			}
		})
	}
}

func redact(u *url.URL) string { return u.Redacted() }
