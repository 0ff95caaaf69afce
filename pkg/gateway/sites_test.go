package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// siteResolver resolves every name under site.test to 127.0.0.1, as a
// site's DNS would point its names at its servers.
type siteResolver struct{}

func (siteResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "site.test" || strings.HasSuffix(host, ".site.test") {
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
	burn, err := u.store.BurnByProxy("crawl", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range burn {
		if b.BannedDomains != 1 {
			t.Errorf("proxy %s counts %d banned domains, want 1 (one site)", name, b.BannedDomains)
		}
	}
}
