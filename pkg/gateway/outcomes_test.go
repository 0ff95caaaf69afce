package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/inspection"
	"github.com/proxyfleet/proxy-operator/pkg/testing/antibot"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// exits are the addresses the three upstreams leave from: the test site
// tells them apart, as a site tells proxies' IPs apart.
var exits = []string{"127.0.4.1", "127.0.4.2", "127.0.4.3"}

// answer is what a crawler got.
type answer struct {
	Status   int
	Attempts string
	Banned   bool
}

func (u *unit) fetch(t *testing.T, c *http.Client, method, target string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, target, nil)
	if method == http.MethodPost {
		req, _ = http.NewRequest(method, target, strings.NewReader("q=1"))
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s through the gateway: %v", method, target, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return answer{Status: resp.StatusCode, Attempts: resp.Header.Get(gateway.HeaderAttempts), Banned: resp.Header.Get(gateway.HeaderBanned) != ""}
}

// released waits until the gateway has given back every lease: it
// releases a rotating lease after the answer is written, so a crawler's
// next request can come before the release lands.
func (u *unit) released(t *testing.T) {
	t.Helper()
	err := proxytest.Poll(5*time.Second, func() bool {
		held, err := u.api.LiveLeases()
		return err == nil && held == 0
	})
	if err != nil {
		t.Fatalf("leases still held after the answer: %v", err)
	}
}

func (u *unit) crawler(username string, roots *x509.CertPool) *http.Client {
	proxy := &url.URL{Scheme: "http", Host: u.addr, User: url.UserPassword(username, "ignored")}
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(proxy), DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots},
	}, Timeout: 20 * time.Second}
}

// A site bans each exit after one page. Each of three proxies serves one
// page; the fourth request is judged banned through each in turn (the
// first try and the rule's two retries) and reaches the crawler as the
// site's 403 after three attempts; then every proxy cools down for the
// site and nothing more is sent to it.
func TestBansAreRetriedOnFreshProxiesThenCoolDown(t *testing.T) {
	site := antibot.Start(t, antibot.Options{BanAfter: 1, ChallengeShare: -1})
	ca := newCA(t)
	for name, tc := range map[string]struct {
		target   string
		username string
		minters  gateway.Minters
		roots    *x509.CertPool // the crawler's
	}{
		"plain http":          {target: site.HTTP.URL, username: "ns-crawl"},
		"inspected https":     {target: site.HTTPS.URL, username: "ns-crawl", minters: minters{"crawl": ca}, roots: pool(ca.Cert)},
		"https not inspected": {target: site.HTTPS.URL, username: "ns-crawl", minters: minters{}, roots: pool(site.HTTPS.Certificate())},
	} {
		t.Run(name, func(t *testing.T) {
			u := startUnitWith(t, unitOptions{leaveFrom: exitsFor(name), gateway: func(c *gateway.Config) {
				c.Inspection = tc.minters
				c.TargetRootCAs = pool(site.HTTPS.Certificate())
				c.InspectedPorts = []string{port(tc.target)}
			}}, "a", "b", "c")
			crawler := u.crawler(tc.username, tc.roots)
			var got []answer
			for i := range 5 {
				got = append(got, u.fetch(t, crawler, http.MethodGet, tc.target+"/page/"+string(rune('1'+i))))
				u.released(t)
			}
			want := []answer{{200, "1", false}, {200, "1", false}, {200, "1", false}, {403, "3", true}, {503, "", false}}
			if name == "https not inspected" {
				// The gateway sees bytes only: the ban reaches the crawler
				// unjudged, and the proxies stay in use (docs/inspection.md).
				want = []answer{{200, "", false}, {200, "", false}, {200, "", false}, {403, "", false}, {403, "", false}}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

// exitsFor gives each subtest exits of its own: the site's bans are per
// address, for the whole test.
func exitsFor(name string) []string {
	third := map[string]string{"plain http": "4", "inspected https": "5", "https not inspected": "6"}[name]
	out := make([]string, len(exits))
	for i := range exits {
		out[i] = "127.0." + third + "." + string(rune('1'+i))
	}
	return out
}

// A request that is not idempotent is never sent twice: its ban reaches
// the crawler after one attempt, and the proxy still cools down.
func TestABannedPostIsNotRetried(t *testing.T) {
	site := antibot.Start(t, antibot.Options{BanAfter: -1, ChallengeShare: -1})
	u := startUnitWith(t, unitOptions{leaveFrom: []string{"127.0.7.1", "127.0.7.2"}}, "a", "b")
	crawler := u.crawler("ns-crawl", nil)
	if got := u.fetch(t, crawler, http.MethodPost, site.HTTP.URL+"/page/1"); got != (answer{403, "1", true}) {
		t.Errorf("POST = %+v, want the 403 after one attempt, marked banned", got)
	}
	if seen := site.Seen(); len(seen) != 1 {
		t.Errorf("the site saw %v: the POST went out more than once", seen)
	}
}

// An inspected target whose certificate does not verify gets nothing: the
// crawler gets a 502 saying why.
func TestInspectedTargetWithAnInvalidCertificateIsRefused(t *testing.T) {
	site := antibot.Start(t, antibot.Options{})
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{leaveFrom: []string{"127.0.7.3"}, gateway: func(c *gateway.Config) {
		c.Inspection = minters{"crawl": ca}
		c.TargetRootCAs = x509.NewCertPool() // trusts nothing
		c.InspectedPorts = []string{port(site.HTTPS.URL)}
	}}, "a")
	got := u.fetch(t, u.crawler("ns-crawl", pool(ca.Cert)), http.MethodGet, site.HTTPS.URL+"/page/1")
	if got.Status != http.StatusBadGateway {
		t.Errorf("answer %+v, want 502", got)
	}
	if seen := site.Seen(); len(seen) != 0 {
		t.Errorf("the site received %v", seen)
	}
}

// A namespace that did not opt in is tunnelled: the crawler sees the
// site's own certificate, never one of a CA.
func TestANamespaceThatDidNotOptInIsNotInspected(t *testing.T) {
	site := antibot.Start(t, antibot.Options{})
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{gateway: func(c *gateway.Config) {
		c.Inspection = minters{"other": ca}
		c.InspectedPorts = []string{port(site.HTTPS.URL)}
	}}, "a")
	resp, err := u.crawler("ns-crawl", pool(site.HTTPS.Certificate())).Get(site.HTTPS.URL + "/page/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if peer := resp.TLS.PeerCertificates[0]; !peer.Equal(site.HTTPS.Certificate()) {
		t.Errorf("the crawler saw certificate %q, not the site's", peer.Subject)
	}
}

// minters inspects the namespaces it has a CA for.
type minters map[string]*inspection.CA

func (m minters) Minter(namespace string) *inspection.Minter {
	ca, ok := m[namespace]
	if !ok {
		return nil
	}
	mm, err := inspection.NewMinter(ca, 0, nil)
	if err != nil {
		panic(err)
	}
	return mm
}

func newCA(t testing.TB) *inspection.CA {
	t.Helper()
	ca, err := inspection.NewCA("crawl", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func port(rawURL string) string {
	u, _ := url.Parse(rawURL)
	_, p, _ := net.SplitHostPort(u.Host)
	return p
}

// A crawler that keeps its inspected connection alive (Python requests,
// browsers) sends many requests on it: each is forwarded and judged as
// the first was.
func TestInspectedConnectionServesEveryKeptAliveRequest(t *testing.T) {
	site := antibot.Start(t, antibot.Options{})
	ca := newCA(t)
	u := startUnitWith(t, unitOptions{leaveFrom: []string{"127.0.7.4"}, gateway: func(c *gateway.Config) {
		c.Inspection = minters{"crawl": ca}
		c.TargetRootCAs = pool(site.HTTPS.Certificate())
		c.InspectedPorts = []string{port(site.HTTPS.URL)}
	}}, "a")
	crawler := u.crawler("ns-crawl+session-s1", pool(ca.Cert))
	crawler.Transport.(*http.Transport).DisableKeepAlives = false
	var got []answer
	for page := range 3 {
		got = append(got, u.fetch(t, crawler, http.MethodGet, fmt.Sprintf("%s/page/%d", site.HTTPS.URL, page)))
	}
	want := []answer{{Status: 200, Attempts: "1"}, {Status: 200, Attempts: "1"}, {Status: 200, Attempts: "1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers on one kept-alive connection (-want +got):\n%s", diff)
	}
}
