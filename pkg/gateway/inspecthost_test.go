package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Inside an inspected tunnel the lease, the budget, the cool-downs and the
// ban rules are the CONNECT host's: a request whose Host names another
// host is refused, and nothing reaches the target. The CONNECT host in
// another spelling (case, its port) is the same host.
func TestInspectedRequestForAnotherHostIsRefused(t *testing.T) {
	site := startCountingSite(t, false)
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{gateway: inspecting(ca, site.srv)}, "a")
	crawler := u.crawler("ns-crawl", pool(ca.Cert))
	authority := strings.TrimPrefix(site.srv.URL, "https://")
	got := map[string]int{}
	for _, host := range []string{"", authority, "127.0.0.1", "other.example", "127.0.0.1:1", "other.example:" + port(site.srv.URL)} {
		req, _ := http.NewRequest(http.MethodGet, site.srv.URL+"/page", nil)
		req.Host = host
		resp, err := crawler.Do(req)
		if err != nil {
			t.Fatalf("Host %q: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		u.released(t)
		got[host] = resp.StatusCode
		if resp.StatusCode == http.StatusBadRequest && !strings.Contains(string(body), "the Host header must name 127.0.0.1") {
			t.Errorf("Host %q refused with %q, which does not say why", host, body)
		}
	}
	want := map[string]int{"": 200, authority: 200, "127.0.0.1": 200, "other.example": 400, "127.0.0.1:1": 400, "other.example:" + port(site.srv.URL): 400}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers by Host (-want +got):\n%s", diff)
	}
	if n := site.received()["GET"]; n != 3 {
		t.Errorf("the site received %d requests, want the 3 for its own host", n)
	}
}
