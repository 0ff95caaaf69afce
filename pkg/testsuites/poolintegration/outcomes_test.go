package poolintegration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/testing/antibot"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// crawlPages and exits are the crawl: 200 pages over 8 exit IPs,
// a site that bans each IP after banAfter requests.
const (
	crawlPages = 200
	exits      = 8
	banAfter   = 20
)

// TestCrawlThroughBans: a crawler fetches 200 pages through the gateway
// from a site that bans each exit address after 20 requests, with a 403 or
// a 200 challenge page, and knows nothing of the operator. The gateway
// judges each response by the CrawlPolicy's ban rule, retries a banned
// page on a fresh IP, and ends the banned lease for the site; the pool
// recycles its burned members (new instances, new loopback exits); status
// and metrics tell the success rate and the cost per 1,000.
func TestCrawlThroughBans(t *testing.T) {
	pt := newPoolTest(t, "--local-loopback-exits")
	site := antibot.Start(t, antibot.Options{BanAfter: banAfter, Seed: 7})
	health := proxytest.StartHTTPTarget(t)
	policy := &crawlv1alpha1.CrawlPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "bans"},
		Spec: crawlv1alpha1.CrawlPolicySpec{Default: &crawlv1alpha1.DomainLimits{
			BanDetection: &crawlv1alpha1.BanDetection{BodyPatterns: []string{antibot.ChallengeMarker}},
		}},
	}
	if _, err := pt.crawl.CrawlV1alpha1().CrawlPolicies(pt.ns).Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pt.create(newPool("crawl", exits, health.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Strategy = crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(exits)), MaxUnavailable: ptr.To(intstr.FromInt32(exits))}
		p.Spec.Recycle = &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](1)}
		p.Spec.Cost = &crawlv1alpha1.PoolCost{Currency: "USD", PerInstanceHour: "0.50"}
	}))
	eventually.Check(t, 3*time.Minute, interval, "8 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "crawl", exits) })
	gw := pt.startGateway("--gateway-wait=60s")

	// The crawler: Go's client through the gateway, re-queueing a page the
	// gateway hands back as a ban (its retries were spent), as a crawler
	// re-queues a failed request.
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword("ns-"+pt.ns+"+pool-crawl", "none"), Host: gw}
	crawler := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 90 * time.Second}
	requeued, retried := 0, 0
	for page := range crawlPages {
		for try := 1; ; try++ {
			body, header, err := fetch(t.Context(), crawler, fmt.Sprintf("%s/page/%d", site.HTTP.URL, page))
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if n, _ := strconv.Atoi(header.Get(gateway.HeaderAttempts)); n > 1 {
				retried++
			}
			if strings.Contains(body, fmt.Sprintf("<h1>Page %d</h1>", page)) {
				break
			}
			if header.Get(gateway.HeaderBanned) == "" || try == 5 {
				t.Fatalf("page %d, try %d: neither the page nor a ban the gateway judged: %q (headers %v)", page, try, body, header)
			}
			requeued++
		}
	}
	t.Logf("%d pages fetched; %d answers took more than one attempt, %d pages re-queued by the crawler", crawlPages, retried, requeued)

	// The site's view: every banned address got exactly one answer past
	// its budget (the ban), never another request for the site.
	seen := site.Seen()
	banned := 0
	for ip, st := range seen {
		if !st.Banned {
			continue
		}
		banned++
		if st.Requests != banAfter+1 {
			t.Errorf("%s sent %d requests after its ban (%d in all), want the one the site banned", ip, st.Requests-banAfter-1, st.Requests)
		}
	}
	if banned < exits || len(seen) <= exits {
		t.Errorf("the site saw %d addresses and banned %d; want more than %d (recycled members leave from new ones) and at least %d banned", len(seen), banned, exits, exits)
	}

	// status, kubectl and metrics tell the story.
	eventually.Check(t, time.Minute, interval, "status.usage and status.recycled", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Get(ctx, "crawl", metav1.GetOptions{})
		if err != nil {
			return err
		}
		u := p.Status.Usage
		switch {
		case p.Status.Recycled.Burned < int64(exits):
			return fmt.Errorf("status.recycled.burned %d, want at least %d", p.Status.Recycled.Burned, exits)
		case u == nil:
			return fmt.Errorf("no status.usage")
		case u.Outcomes.OK < crawlPages || u.Outcomes.Banned != int64(banned):
			return fmt.Errorf("status.usage.outcomes %+v, want at least %d ok and %d banned", u.Outcomes, crawlPages, banned)
		case u.Outcomes.SuccessRate == "" || !strings.HasSuffix(u.CostPer1000OK, " USD") || !strings.HasSuffix(u.Cost, " USD"):
			return fmt.Errorf("status.usage %+v: want a success rate, a cost and a cost per 1,000 in USD", u)
		}
		return nil
	})
	cols, err := pt.kubectlWide(t.Context(), "crawl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cols["SUCCESS"], "%") || !strings.HasSuffix(cols["COST/1K"], "USD") {
		t.Errorf("kubectl get pxp -o wide: SUCCESS %q, COST/1K %q; want a rate and a cost", cols["SUCCESS"], cols["COST/1K"])
	}
	scraped, err := pt.op.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := scraped.Value("proxy_operator_pool_outcomes_total", map[string]string{"pool": "crawl", "outcome": "banned"}); v != float64(banned) {
		t.Errorf("proxy_operator_pool_outcomes_total{pool=crawl,outcome=banned} = %v, want %d", v, banned)
	}
	if v, ok := scraped.Value("proxy_operator_pool_cost_per_1000_ok", map[string]string{"pool": "crawl", "currency": "USD"}); !ok || v <= 0 {
		t.Errorf("proxy_operator_pool_cost_per_1000_ok{pool=crawl} = %v (present %v), want a positive cost", v, ok)
	}
	eventually.Check(t, 30*time.Second, interval, "the CrawlPolicy counts the bans", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().CrawlPolicies(pt.ns).Get(ctx, "bans", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Outcomes.Banned != int64(banned) || p.Status.Outcomes.OK < crawlPages {
			return fmt.Errorf("status.outcomes %+v, want %d banned and at least %d ok", p.Status.Outcomes, banned, crawlPages)
		}
		return nil
	})
}

// fetch GETs u and returns the body and the headers.
func fetch(ctx context.Context, c *http.Client, u string) (string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(body), resp.Header, err
}
