package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// TestTieredGrantsOverTheLeaseAPI is issue 53's site through the lease
// API and a CrawlPolicy object as the feed applies it: bans.example bans
// the own VMs' IPs at once, and never the residential pool's, for 20
// minutes; calm.example never bans. A crawler acquires for each every
// second without a selector and releases with the site's verdict. After
// escalation every grant for bans.example goes to the residential pool
// within one window (but for its probes), calm.example stays on own VMs,
// and bans.example steps down within the quiet period plus a window once
// it stops banning. An acquire naming a pool is not tiered.
func TestTieredGrantsOverTheLeaseAPI(t *testing.T) {
	const banning, run = 20 * time.Minute, 40 * time.Minute
	ts := newTestServer(t)
	for i := range 10 {
		for _, pool := range []string{"own-vms", "residential"} {
			ts.store.Upsert(newProxy(fmt.Sprintf("%s-%d", pool, i), withMaxLeases(100), withLabels(crawlv1alpha1.PoolLabel, pool),
				func(p *store.ProxyInfo) { p.Pool = pool }))
		}
	}
	tierOf := func(pool string) crawlv1alpha1.ProxyTier {
		return crawlv1alpha1.ProxyTier{Name: pool, Selector: metav1.LabelSelector{MatchLabels: map[string]string{crawlv1alpha1.PoolLabel: pool}}}
	}
	policy := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "polite"},
		Spec: crawlv1alpha1.CrawlPolicySpec{Default: &crawlv1alpha1.DomainLimits{
			Tiers:   []crawlv1alpha1.ProxyTier{tierOf("own-vms"), tierOf("residential")},
			Tiering: &crawlv1alpha1.Tiering{Window: &metav1.Duration{Duration: 2 * time.Minute}, QuietPeriod: &metav1.Duration{Duration: 10 * time.Minute}},
		}}}
	ts.store.SetCrawlPolicy(feed.CrawlPolicyFrom(policy))
	const window, quiet = 2 * time.Minute, 10 * time.Minute

	poolOf := func(name string) string { return name[:strings.LastIndex(name, "-")] }
	// lastBan is the last ban before escalation: the quiet period counts
	// from it.
	var lastBan, escalated, steppedDown time.Duration = -1, -1, -1
	for at := time.Duration(0); at < run; at += time.Second {
		for _, site := range []string{"bans.example", "calm.example"} {
			l := ts.acquire(`{"holder":"crawler","namespace":"crawl","domain":"` + site + `"}`)
			pool := poolOf(l.Proxy.Name)
			outcome := "ok"
			switch {
			case site == "calm.example" && pool != "own-vms":
				t.Errorf("at %v calm.example was granted %s, want own-vms throughout", at, l.Proxy.Name)
			case site == "bans.example" && at < banning && pool == "own-vms":
				outcome = "banned"
				if escalated < 0 {
					lastBan = at
				} else if at < lastBan+quiet {
					t.Errorf("at %v bans.example was granted %s, escalated at %v: want residential until the quiet period ends", at, l.Proxy.Name, lastBan)
				}
			case site == "bans.example" && at < banning && escalated < 0:
				escalated = at
			case site == "bans.example" && at >= banning && pool == "residential":
				steppedDown = -1
			case site == "bans.example" && at >= banning && steppedDown < 0:
				steppedDown = at
			}
			if rec := ts.do(http.MethodDelete, "/v1/leases/"+l.ID+"?outcome="+outcome, ""); rec.Code != http.StatusNoContent {
				t.Fatalf("release: %d %s", rec.Code, rec.Body)
			}
		}
		ts.clk.Step(time.Second)
	}
	if escalated < 0 || escalated > window {
		t.Errorf("bans.example first granted on residential at %v, want within a window (%v) of its first ban at 0s", escalated, window)
	}
	if steppedDown < 0 || steppedDown > banning+quiet+window {
		t.Errorf("bans.example back on own VMs for good from %v, want by %v (stopped banning at %v)", steppedDown, banning+quiet+window, banning)
	}
	t.Logf("over the lease API: bans.example on residential from %v, back on own VMs for good from %v (stopped banning at %v)", escalated, steppedDown, banning)

	// Escalate again, in a window of its own. The five bans were on five
	// own VMs within the site-ban window (sitebans.go): a crawler naming
	// the own-VM pool is refused, 429 SiteBanning, not sent a sixth.
	ts.clk.Step(window)
	for range 5 {
		l := ts.acquire(`{"holder":"crawler","namespace":"crawl","domain":"bans.example"}`)
		ts.do(http.MethodDelete, "/v1/leases/"+l.ID+"?outcome=banned", "")
	}
	if l := ts.acquire(`{"holder":"crawler","namespace":"crawl","domain":"bans.example"}`); poolOf(l.Proxy.Name) != "residential" {
		t.Errorf("after 5 more bans, granted %s, want residential", l.Proxy.Name)
	}
	rec := ts.do(http.MethodPost, "/v1/leases", `{"holder":"crawler","namespace":"crawl","domain":"bans.example","selector":"crawl.proxyfleet.io/pool=own-vms"}`)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"code":"SiteBanning"`) || rec.Header().Get("Retry-After") == "" {
		t.Errorf("an acquire naming the own-vms pool after five own VMs were banned: %d %s, want 429 SiteBanning with Retry-After", rec.Code, rec.Body)
	}
}
