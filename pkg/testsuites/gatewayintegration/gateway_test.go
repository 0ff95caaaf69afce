package gatewayintegration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const upstreamUser = "fleet"

// fleet starts n tinyproxies and a squid, each requiring its own password,
// as External Proxies in pool; latencies order them (lower first).
func (h *harness) fleet(t *testing.T, pool string, tinyproxies int, squid bool) []*upstream {
	t.Helper()
	var ups []*upstream
	for i := range tinyproxies {
		password := fmt.Sprintf("tiny-secret-%s-%d", pool, i)
		p := proxytest.StartTinyproxy(t, proxytest.Options{Username: upstreamUser, Password: password})
		ups = append(ups, h.addUpstream(t, fmt.Sprintf("%s-tiny-%d", pool, i), pool, p, upstreamUser, password, int64(10+i)))
	}
	if squid {
		password := "squid-secret-" + pool
		p := proxytest.StartSquid(t, proxytest.Options{Username: upstreamUser, Password: password})
		ups = append(ups, h.addUpstream(t, pool+"-squid", pool, p, upstreamUser, password, 30))
	}
	return ups
}

// noCredentials fails if any upstream password appears in texts or in the
// gateway's and lease API's logs.
func (h *harness) noCredentials(t *testing.T, ups []*upstream, texts ...string) {
	t.Helper()
	texts = append(texts, h.logs.String())
	for _, u := range ups {
		for i, text := range texts {
			if strings.Contains(text, u.password) {
				t.Errorf("the password of upstream %s appears in output %d (the last is the logs)", u.name, i)
			}
		}
	}
}

func TestSessionSticksToItsUpstream(t *testing.T) {
	h := startHarness(t, "gw-sticky", harnessOptions{})
	ups := h.fleet(t, "web", 2, true)
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t)
	var outputs []string

	// curl: one session, three requests (two plain, one CONNECT tunnel).
	proxyA := h.gatewayURL("ns-gw-sticky+pool-web+session-a", token)
	first := curl(t, proxyA, target.URL+"/echo?m=curl-a-1")
	second := curl(t, proxyA, target.URL+"/echo?m=curl-a-2")
	tunnel := curl(t, proxyA, httpsTarget.URL+"/echo", "--cacert", caFile(t, httpsTarget))
	for _, r := range []curlResult{first, second, tunnel} {
		if r.status != http.StatusOK {
			t.Fatalf("curl through the gateway: status %d, CONNECT %d; body %q\n%s", r.status, r.connect, r.body, r.verbose)
		}
		outputs = append(outputs, r.body, r.verbose)
	}
	if tunnel.connect != http.StatusOK {
		t.Errorf("CONNECT answered %d", tunnel.connect)
	}
	a1, a2 := servedBy(t, ups, "m=curl-a-1"), servedBy(t, ups, "m=curl-a-2")
	if a1 != a2 {
		t.Errorf("session a went through %s, then %s: want one upstream", a1, a2)
	}
	if got := servedBy(t, ups, "CONNECT "+httpsTarget.Listener.Addr().String()); got != a1 {
		t.Errorf("session a's tunnel went through %s, its requests through %s", got, a1)
	}
	// The target sees neither the crawler's token nor anyone's Proxy-Authorization.
	if strings.Contains(first.body, token) || strings.Contains(first.body, "Proxy-Authorization") {
		t.Errorf("the target received the gateway's credentials: %s", first.body)
	}

	// Python requests: another session on maxLeases 1 proxies gets another
	// upstream, and keeps it.
	results := pyRequests(t, pyJob{
		Proxy: h.gatewayURL("ns-gw-sticky+pool-web+session-b", token),
		URLs:  []string{target.URL + "/echo?m=py-b-1", target.URL + "/echo?m=py-b-2", httpsTarget.URL + "/echo"},
	})
	for _, r := range results[0] {
		if r.Status != http.StatusOK {
			t.Fatalf("requests through the gateway: %+v", r)
		}
		outputs = append(outputs, r.Text, fmt.Sprint(r.Headers))
	}
	b1, b2 := servedBy(t, ups, "m=py-b-1"), servedBy(t, ups, "m=py-b-2")
	if b1 != b2 || b1 == a1 {
		t.Errorf("session b went through %s, then %s; session a holds %s: want one upstream other than a's", b1, b2, a1)
	}
	if n := len(h.gatewayLeases(t)); n != 2 {
		t.Errorf("the gateway holds %d leases, want 2 (one per session)", n)
	}
	h.noCredentials(t, ups, outputs...)
}

func TestTwoSessionsAtOnceGetDifferentUpstreams(t *testing.T) {
	h := startHarness(t, "gw-twice", harnessOptions{})
	ups := h.fleet(t, "pair", 1, true) // a tinyproxy and a squid, maxLeases 1 each
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)

	results := pyRequests(t,
		pyJob{Proxy: h.gatewayURL("ns-gw-twice+pool-pair+session-x", token), URLs: []string{target.URL + "/echo?m=x-1", target.URL + "/echo?m=x-2"}},
		pyJob{Proxy: h.gatewayURL("ns-gw-twice+pool-pair+session-y", token), URLs: []string{target.URL + "/echo?m=y-1", target.URL + "/echo?m=y-2"}},
	)
	for _, job := range results {
		for _, r := range job {
			if r.Status != http.StatusOK {
				t.Fatalf("requests through the gateway: %+v", r)
			}
		}
	}
	x1, x2, y1, y2 := servedBy(t, ups, "m=x-1"), servedBy(t, ups, "m=x-2"), servedBy(t, ups, "m=y-1"), servedBy(t, ups, "m=y-2")
	if x1 != x2 || y1 != y2 || x1 == y1 {
		t.Errorf("session x: %s, %s; session y: %s, %s: want each on one upstream, not the same", x1, x2, y1, y2)
	}

	// A third session finds nothing free: 503 with Retry-After.
	r := curl(t, h.gatewayURL("ns-gw-twice+pool-pair+session-z", token), target.URL+"/echo?m=z-1")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "no matching Ready proxy has free capacity") ||
		!strings.Contains(r.verbose, "Retry-After: 1") {
		t.Errorf("third session: %d %q, want 503 naming no free capacity with Retry-After\n%s", r.status, r.body, r.verbose)
	}
	h.noCredentials(t, ups, r.body, r.verbose)
}

func TestRotatingModeLeavesNoLease(t *testing.T) {
	h := startHarness(t, "gw-rotate", harnessOptions{})
	ups := h.fleet(t, "rot", 2, true)
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t)
	proxy := h.gatewayURL("ns-gw-rotate+pool-rot", token)

	for i, url := range []string{target.URL + "/echo?m=rot-1", httpsTarget.URL + "/echo"} {
		r := curl(t, proxy, url, "--cacert", caFile(t, httpsTarget))
		if r.status != http.StatusOK {
			t.Fatalf("curl %d: %d %q\n%s", i, r.status, r.body, r.verbose)
		}
		h.noCredentials(t, ups, r.body, r.verbose)
	}
	results := pyRequests(t, pyJob{Proxy: proxy, URLs: []string{target.URL + "/echo?m=rot-2", target.URL + "/echo?m=rot-3", httpsTarget.URL + "/echo"}})
	for _, r := range results[0] {
		if r.Status != http.StatusOK {
			t.Fatalf("requests: %+v", r)
		}
	}
	poll(t, "every rotating lease released", func() bool { return len(h.gatewayLeases(t)) == 0 })
	if h.gw.Sessions() != 0 {
		t.Errorf("rotating mode made %d sessions", h.gw.Sessions())
	}
}

func TestRevokedLeaseMovesTheSession(t *testing.T) {
	h := startHarness(t, "gw-revoke", harnessOptions{})
	ups := h.fleet(t, "rev", 2, false)
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)
	proxy := h.gatewayURL("ns-gw-revoke+pool-rev+session-r", token)

	if r := curl(t, proxy, target.URL+"/echo?m=rev-1"); r.status != http.StatusOK {
		t.Fatalf("first request: %d %q", r.status, r.body)
	}
	before := servedBy(t, ups, "m=rev-1")
	var held *upstream
	for _, u := range ups {
		if u.name == before {
			held = u
		}
	}
	// The proxy leaves Ready (the controller's verdict after failed probes):
	// the store revokes the session's lease.
	h.setPhase(t, held, crawlv1alpha1.PhaseUnhealthy, 10)
	poll(t, "the lease is revoked", func() bool { return len(h.gatewayLeases(t)) == 0 })

	if r := curl(t, proxy, target.URL+"/echo?m=rev-2"); r.status != http.StatusOK {
		t.Fatalf("request after the revocation: %d %q", r.status, r.body)
	}
	after := servedBy(t, ups, "m=rev-2")
	if after == before {
		t.Errorf("the session stayed on %s after its lease was revoked", before)
	}
	if r := curl(t, proxy, target.URL+"/echo?m=rev-3"); r.status != http.StatusOK || servedBy(t, ups, "m=rev-3") != after {
		t.Errorf("the moved session does not stick to %s", after)
	}
}
