package gatewayintegration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/crawlpolicy"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestTiersThroughTheGateway is issue 53's site on real parts: a
// CrawlPolicy with two tiers on the real API server, eight own-VM proxies
// (exits 127.1.0.x) and four network proxies (exits 127.2.0.x), and a
// crawler through the gateway without a pool term. bans.example
// (127.0.0.1) answers 403 to every own-VM exit while banning and never to
// a network exit; calm (127.0.0.2) never bans. The gateway judges the
// 403s; the store escalates bans.example to the network tier within its
// first request's retries, keeps calm on own VMs, and steps bans.example
// back down once it stops banning, within the quiet period plus a window.
// The policy's status on the API server shows the domain's tier.
func TestTiersThroughTheGateway(t *testing.T) {
	const quiet, window = 3 * time.Second, time.Minute
	h := startHarness(t, "gw-tiers", harnessOptions{wait: 10 * time.Second})
	token := h.crawler(t, "crawler", true)
	for i := range 8 {
		exit := netip.MustParseAddr(fmt.Sprintf("127.1.0.%d", i+1))
		h.addUpstream(t, fmt.Sprintf("own-%d", i), "own-vms", proxytest.StartInProcess(t, proxytest.Options{Configure: func(c *forwardproxy.Config) { c.SourceAddr = exit }}), "", "", 10)
	}
	for i := range 4 {
		exit := netip.MustParseAddr(fmt.Sprintf("127.2.0.%d", i+1))
		h.addUpstream(t, fmt.Sprintf("net-%d", i), "network", proxytest.StartInProcess(t, proxytest.Options{Configure: func(c *forwardproxy.Config) { c.SourceAddr = exit }}), "", "", 20)
	}
	var banning atomic.Bool
	banning.Store(true)
	bans := startTierSite(t, "127.0.0.1", func(exit string) bool { return banning.Load() && strings.HasPrefix(exit, "127.1.") })
	calm := startTierSite(t, "127.0.0.2", func(string) bool { return false })

	tierOf := func(pool string) crawlv1alpha1.ProxyTier {
		return crawlv1alpha1.ProxyTier{Name: pool, Selector: metav1.LabelSelector{MatchLabels: map[string]string{gateway.PoolLabel: pool}}}
	}
	policy := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Name: "tiers"}, Spec: crawlv1alpha1.CrawlPolicySpec{Default: &crawlv1alpha1.DomainLimits{
		Tiers: []crawlv1alpha1.ProxyTier{tierOf("own-vms"), tierOf("network")},
		Tiering: &crawlv1alpha1.Tiering{Window: &metav1.Duration{Duration: window}, MinOutcomes: ptr.To[int32](3),
			QuietPeriod: &metav1.Duration{Duration: quiet}, ProbeShare: "1"},
	}}}
	if _, err := h.crawl.CrawlV1alpha1().CrawlPolicies(h.ns).Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader's status writer, as the operator runs it.
	factory := crawlinformers.NewSharedInformerFactoryWithOptions(h.crawl, 0, crawlinformers.WithNamespace(h.ns))
	policies := factory.Crawl().V1alpha1().CrawlPolicies()
	writer := crawlpolicy.NewStatusWriter(h.crawl, policies.Lister(), h.store, 200*time.Millisecond)
	factory.Start(t.Context().Done())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- writer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	poll(t, "the policy's tiers in the store", func() bool {
		stats := h.store.CrawlPolicyStats(store.ObjectName{Namespace: h.ns, Name: "tiers"})
		return len(stats) == 1 && len(stats[0].Tiers) == 2
	})

	proxyURL, _ := url.Parse(h.gatewayURL("ns-"+h.ns, token))
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}, Timeout: 30 * time.Second}
	// get fetches site through the gateway; the answer's exit and the
	// proxy the gateway says answered.
	get := func(site *httptest.Server) (status int, proxy string) {
		t.Helper()
		resp, err := c.Get(site.URL + "/")
		if err != nil {
			t.Fatalf("GET %s through the gateway: %v", site.URL, err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(gateway.HeaderProxy)
	}

	escalatedAt := -1
	for i := range 10 {
		status, proxy := get(bans)
		onNetwork := strings.Contains(proxy, "/net-")
		if escalatedAt < 0 && onNetwork && status == http.StatusOK {
			escalatedAt = i
		} else if escalatedAt >= 0 && !onNetwork {
			t.Errorf("bans.example request %d answered %d by %s after escalation at request %d, want a network proxy", i, status, proxy, escalatedAt)
		}
		if status, proxy := get(calm); status != http.StatusOK || !strings.Contains(proxy, "/own-") {
			t.Errorf("calm request %d answered %d by %s, want 200 by an own VM", i, status, proxy)
		}
	}
	if escalatedAt < 0 || escalatedAt > 1 {
		t.Fatalf("bans.example first served by the network at request %d, want within its first two (3 bans escalate)", escalatedAt)
	}
	poll(t, "status on the API server shows 127.0.0.1 on the network tier", func() bool {
		p, err := h.crawl.CrawlV1alpha1().CrawlPolicies(h.ns).Get(t.Context(), "tiers", metav1.GetOptions{})
		if err != nil || len(p.Status.Rules) != 1 {
			return false
		}
		for _, d := range p.Status.Rules[0].BusiestDomains {
			if d.Domain == "127.0.0.1" && d.Tier == "network" {
				return true
			}
		}
		return false
	})

	banning.Store(false)
	stopped := time.Now()
	var steppedDown time.Duration
	if err := proxytest.Poll(quiet+window, func() bool {
		_, proxy := get(bans)
		steppedDown = time.Since(stopped)
		return strings.Contains(proxy, "/own-")
	}); err != nil {
		t.Fatalf("bans.example stopped banning; not back on own VMs within the quiet period plus a window (%v): %v", quiet+window, err)
	}
	t.Logf("bans.example on the network from request %d; back on own VMs %v after it stopped banning (quiet period %v)", escalatedAt, steppedDown.Round(time.Millisecond), quiet)
	for i := range 5 {
		if status, proxy := get(bans); status != http.StatusOK || !strings.Contains(proxy, "/own-") {
			t.Errorf("after stepping down, request %d answered %d by %s, want 200 by an own VM", i, status, proxy)
		}
	}
}

// startTierSite is a site on host that answers 403 to a connection from
// an exit banned says so, 200 otherwise.
func startTierSite(t *testing.T, host string, banned func(exit string) bool) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exit, _, _ := net.SplitHostPort(r.RemoteAddr)
		if banned(exit) {
			http.Error(w, "banned", http.StatusForbidden)
			return
		}
		fmt.Fprintln(w, "ok from", exit)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
