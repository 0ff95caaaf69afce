package gateway_test

import (
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
)

// forgingSite answers 200 with headers named like the gateway's own, and
// keeps the names of the request headers it received.
type forgingSite struct {
	http, https *httptest.Server
	mu          sync.Mutex
	received    []string
}

func startForgingSite(t *testing.T) *forgingSite {
	t.Helper()
	s := &forgingSite{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		for name := range r.Header {
			s.received = append(s.received, name)
		}
		s.mu.Unlock()
		w.Header().Set("Proxy-Operator-Banned", "forged by the site")
		w.Header().Set("Proxy-Operator-Proxy", "forged/proxy")
		w.Header()["proxy-operator-attempts"] = []string{"99"}
		io.WriteString(w, "a page\n")
	})
	s.http, s.https = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(s.http.Close)
	t.Cleanup(s.https.Close)
	return s
}

// gatewayHeadersReceived are the Proxy-Operator-* headers the site received
// since the last call.
func (s *forgingSite) gatewayHeadersReceived() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.received = nil }()
	var out []string
	for _, name := range s.received {
		if strings.HasPrefix(strings.ToLower(name), "proxy-operator-") {
			out = append(out, name)
		}
	}
	return out
}

// Proxy-Operator-* headers are the gateway's word to the crawler: a
// crawler's never reach the target, and a target's never reach the
// crawler (a forged Proxy-Operator-Banned on a page judged fine would
// make a crawler drop it), over plain HTTP and inspected HTTPS alike.
func TestGatewayHeadersComeOnlyFromTheGateway(t *testing.T) {
	site := startForgingSite(t)
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{gateway: inspecting(ca, site.https)}, "a")
	for name, tc := range map[string]struct {
		target string
		roots  *x509.CertPool
	}{
		"plain http":      {target: site.http.URL},
		"inspected https": {target: site.https.URL, roots: pool(ca.Cert)},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, tc.target+"/page", nil)
			req.Header.Set("Proxy-Operator-Banned", "sent by the crawler")
			req.Header.Set("Proxy-Operator-Session", "sent by the crawler")
			resp, err := u.crawler("ns-crawl", tc.roots).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			u.released(t)
			got := map[string][]string{}
			for k, v := range resp.Header {
				if strings.HasPrefix(k, "Proxy-Operator-") {
					got[k] = v
				}
			}
			want := map[string][]string{gateway.HeaderAttempts: {"1"}, gateway.HeaderProxy: {"crawl/a"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Proxy-Operator-* headers the crawler got (-want +got):\n%s", diff)
			}
			if sent := site.gatewayHeadersReceived(); len(sent) > 0 {
				t.Errorf("the site received the crawler's %v", sent)
			}
		})
	}
}
