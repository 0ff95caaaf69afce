package gateway_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/inspection"
	"github.com/proxyfleet/proxy-operator/pkg/testing/leaseapitest"
)

// countingSite reads each request whole and counts it by method; with
// reset it resets the connection instead of answering (the target may
// have acted on the request, and nobody can tell), else it answers 200.
type countingSite struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func startCountingSite(t *testing.T, reset bool) *countingSite {
	t.Helper()
	s := &countingSite{seen: map[string]int{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen[r.Method]++
		s.mu.Unlock()
		if !reset {
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := conn.(*tls.Conn); ok {
			_ = tc.NetConn().(*net.TCPConn).SetLinger(0) // close with a reset
		}
		conn.Close()
	}))
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// inspecting makes a unit's gateway inspect namespace crawl's CONNECTs to
// site with ca, trusting site's certificate.
func inspecting(ca *inspection.CA, site *httptest.Server) func(*gateway.Config) {
	return func(c *gateway.Config) {
		c.Inspection = minters{"crawl": ca}
		c.TargetRootCAs = pool(site.Certificate())
		c.InspectedPorts = []string{port(site.URL)}
	}
}

func (s *countingSite) received() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// A target that resets the connection after reading the request may have
// acted on it: a bodyless POST, a DELETE, a PUT reach it once and the
// crawler gets a 502; a GET, and a POST that names its Idempotency-Key,
// are safe to send again and go once more through the next proxy.
func TestRequestsWrittenToTheTargetAreResentOnlyWhenSafe(t *testing.T) {
	site := startCountingSite(t, true)
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{gateway: inspecting(ca, site.srv)}, "a", "b", "c")
	crawler := u.crawler("ns-crawl", pool(ca.Cert))
	send := func(method string, header http.Header) int {
		req, _ := http.NewRequest(method, site.srv.URL+"/item/1", nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := crawler.Do(req)
		if err != nil {
			t.Fatalf("%s through the gateway: %v", method, err)
		}
		resp.Body.Close()
		u.released(t)
		return resp.StatusCode
	}
	statuses := map[string]int{
		"POST":   send(http.MethodPost, nil),
		"DELETE": send(http.MethodDelete, nil),
		"PUT":    send(http.MethodPut, nil),
		"GET":    send(http.MethodGet, nil),
		"PATCH":  send(http.MethodPatch, http.Header{"Idempotency-Key": {"order-7"}}),
	}
	wantStatuses := map[string]int{"POST": 502, "DELETE": 502, "PUT": 502, "GET": 502, "PATCH": 502}
	if diff := cmp.Diff(wantStatuses, statuses); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	want := map[string]int{"POST": 1, "DELETE": 1, "PUT": 1, "GET": 2, "PATCH": 2}
	if diff := cmp.Diff(want, site.received()); diff != "" {
		t.Errorf("requests the target received, by method (-want +got):\n%s", diff)
	}
}

// An upstream that refuses before anything reaches the target (it cannot
// be dialled) leaves nothing sent: a POST goes through the next proxy.
func TestAPostIsTriedOnTheNextProxyWhenTheUpstreamRefusedIt(t *testing.T) {
	site := startCountingSite(t, false)
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{gateway: inspecting(ca, site.srv)}, "a")
	// A proxy the store hands out first (same latency as a, name before
	// it) whose address answers nothing.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	u.api.Upsert(leaseapitest.Proxy{Namespace: "crawl", Name: "0dead", URL: "http://" + deadAddr, MaxLeases: 1, ReadySince: t0})
	req, _ := http.NewRequest(http.MethodPost, site.srv.URL+"/item/1", strings.NewReader(""))
	resp, err := u.crawler("ns-crawl", pool(ca.Cert)).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := site.received(); resp.StatusCode != http.StatusOK || got["POST"] != 1 || resp.Header.Get(gateway.HeaderAttempts) != "2" {
		t.Errorf("%d after %q attempts, the target received %v; want 200 on the second attempt, the POST received once",
			resp.StatusCode, resp.Header.Get(gateway.HeaderAttempts), got)
	}
}
