package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
)

// siteResolver resolves every name under site.test, and calm.test, to
// 127.0.0.1, as a site's DNS would point its names at its servers.
type siteResolver struct{}

func (siteResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "site.test" || strings.HasSuffix(host, ".site.test") || host == "calm.test" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// Issue 64: a site that answers 403 on three of its names, fetched once
// on each. The first fetch is judged banned on each of the three proxies
// (the try and the rule's two retries); the site's other names find every
// proxy cooling down for the site, and no proxy counts more than one
// banned domain. Before, each name was a site of its own: 9 requests
// reached the site and every proxy counted 3 banned domains, a pool's
// recycle threshold at maxBannedDomains 3.
func TestASitesNamesAreOneSite(t *testing.T) {
	var received atomic.Int64
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(site.Close)
	u := startUnitWith(t, unitOptions{resolver: siteResolver{}}, "a", "b", "c")
	crawler := u.crawler("ns-crawl", nil)
	var got []answer
	for _, name := range []string{"a", "b", "c"} {
		got = append(got, u.fetch(t, crawler, http.MethodGet, "http://"+name+".site.test:"+port(site.URL)+"/"))
		u.released(t)
	}
	want := []answer{{403, "3", true}, {503, "", false}, {503, "", false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if n := received.Load(); n != 3 {
		t.Errorf("the site received %d requests, want 3", n)
	}
	burn, err := u.api.BurnByProxy("crawl", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range burn {
		if b.BannedDomains != 1 {
			t.Errorf("proxy %s counts %d banned domains, want 1 (one site)", name, b.BannedDomains)
		}
	}
}

// A site that bans every proxy gets the bound's worth (2 here), then the
// crawler is told why nothing more is sent: 429, the reason in
// Proxy-Operator-Error and Proxy-Status, Retry-After, and the site named
// in the body, for any of its names; other sites are served.
func TestASiteThatBannedTheBoundIsRefusedWithItsReason(t *testing.T) {
	var received atomic.Int64
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "calm.test") {
			w.WriteHeader(http.StatusOK)
			return
		}
		received.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(site.Close)
	u := startUnitWith(t, unitOptions{resolver: siteResolver{}, siteBanProxies: 2}, "a", "b", "c", "d")
	crawler := u.crawler("ns-crawl", nil)
	type refusal struct {
		Status             int
		Error, ProxyStatus string
		RetryAfter         bool
		NamesSite          bool
	}
	var got []refusal
	for _, host := range []string{"www.site.test", "shop.site.test", "calm.test"} {
		resp, err := crawler.Get("http://" + host + ":" + port(site.URL) + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		u.released(t)
		got = append(got, refusal{Status: resp.StatusCode, Error: resp.Header.Get(gateway.HeaderError), ProxyStatus: resp.Header.Get("Proxy-Status"),
			RetryAfter: resp.Header.Get("Retry-After") != "", NamesSite: strings.Contains(string(body), "site.test banned 2 distinct proxies of this namespace within 10m0s")})
	}
	refused := refusal{Status: 429, Error: "site_banning", ProxyStatus: `proxy-operator-gateway; error=http_request_denied; details="site_banning"`, RetryAfter: true, NamesSite: true}
	want := []refusal{refused, refused, {Status: 200}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if n := received.Load(); n != 2 {
		t.Errorf("the site received %d requests, want 2 (the bound)", n)
	}
}
