package poolintegration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/inspection"
	"github.com/proxyfleet/proxy-operator/pkg/testing/antibot"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
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
	t.Parallel()
	c := startBanCrawl(t)
	gw := c.pt.startGateway("--gateway-wait=60s")
	c.crawl(t, c.client(gw, nil), c.site.HTTP.URL)
	c.checkOutcomes(t)
	c.checkTransferred(t)
}

// TestInspectedHTTPSCrawl: over HTTPS the gateway sees nothing until the
// namespace opts into inspection: the same crawl then gives the same result
// as over HTTP, the crawler trusting the CA the operator published in its
// namespace; curl, Python requests and Scrapy get their pages through it
// too. The CA key stays in the operator's namespace, in no log.
func TestInspectedHTTPSCrawl(t *testing.T) {
	t.Parallel()
	kube := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config)
	operatorNS := operatortest.NewNamespace(t, kube)
	c := startBanCrawl(t, "--inspection-ca-namespace="+operatorNS)
	roots := filepath.Join(t.TempDir(), "site.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.site.HTTPS.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(c.site.HTTPS.Listener.Addr().String())
	gw := c.pt.startGateway("--gateway-wait=60s", "--inspection-ca-namespace="+operatorNS, "--inspection-target-roots="+roots, "--inspection-ports=443,"+port)

	// Not opted in: the tunnel hides the bans; the crawler meets them, the
	// fleet counts none. (A site of its own, whose bans the crawl below
	// must not inherit.)
	blindSite := antibot.Start(t, antibot.Options{BanAfter: 2})
	siteRoots := x509.NewCertPool()
	siteRoots.AddCert(blindSite.HTTPS.Certificate())
	blind := c.client(gw, siteRoots)
	sawBan := false
	for page := range 2 * banAfter {
		body, _, err := fetch(t.Context(), blind, fmt.Sprintf("%s/page/%d", blindSite.HTTPS.URL, page))
		if err != nil {
			t.Fatalf("uninspected page %d: %v", page, err)
		}
		sawBan = sawBan || !strings.Contains(body, fmt.Sprintf("<h1>Page %d</h1>", page))
	}
	if !sawBan {
		t.Fatalf("%d uninspected pages, none banned: the site bans each address after 2", 2*banAfter)
	}
	if p, err := c.pt.crawl.CrawlV1alpha1().ProxyPools(c.pt.ns).Get(t.Context(), "crawl", metav1.GetOptions{}); err != nil || (p.Status.Usage != nil && p.Status.Usage.Outcomes.Banned != 0) {
		t.Fatalf("without inspection the fleet counted bans (%v, %+v)", err, p.Status.Usage)
	}

	// Opted in: the leader issues the CA, publishes it, and the crawl
	// goes as over HTTP.
	ns, err := kube.CoreV1().Namespaces().Get(t.Context(), c.pt.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[inspection.NamespaceLabel] = inspection.NamespaceLabelValue
	if _, err := kube.CoreV1().Namespaces().Update(t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var bundle []byte
	eventually.Check(t, time.Minute, interval, "the CA published in "+c.pt.ns, func(ctx context.Context) error {
		cm, err := kube.CoreV1().ConfigMaps(c.pt.ns).Get(ctx, inspection.BundleConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		bundle = []byte(cm.Data[inspection.BundleKey])
		return nil
	})
	trusted := x509.NewCertPool()
	if !trusted.AppendCertsFromPEM(bundle) {
		t.Fatalf("the published bundle holds no certificate: %q", bundle)
	}
	eventually.Check(t, time.Minute, interval, "the gateway inspects "+c.pt.ns, func(ctx context.Context) error {
		_, header, err := fetch(ctx, c.client(gw, trusted), c.site.HTTPS.URL+"/page/0")
		if err != nil {
			return err
		}
		if header.Get(gateway.HeaderAttempts) == "" {
			return fmt.Errorf("no %s header: not inspected yet", gateway.HeaderAttempts)
		}
		return nil
	})
	c.crawl(t, c.client(gw, trusted), c.site.HTTPS.URL)
	bundleFile := filepath.Join(t.TempDir(), "inspection-ca.crt")
	if err := os.WriteFile(bundleFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	c.crawlWithOutsideClients(t, gw, bundleFile)
	c.checkOutcomes(t)

	// The key: in the operator's namespace only, in no log.
	secrets, err := kube.CoreV1().Secrets(c.pt.ns).List(t.Context(), metav1.ListOptions{LabelSelector: inspection.CALabel})
	if err != nil || len(secrets.Items) != 0 {
		t.Errorf("CA Secrets in the tenant's namespace: %d (%v)", len(secrets.Items), err)
	}
	for _, p := range []*operatortest.Process{c.pt.op, c.pt.gateway} {
		if strings.Contains(p.Logs(), "PRIVATE KEY") {
			t.Errorf("%s's log holds a private key", p.Name)
		}
	}
}

// banCrawl is the crawl's parts: the operator's pool test, the site and
// the health target.
type banCrawl struct {
	pt   *poolTest
	site *antibot.Site
}

// startBanCrawl starts the operator (with extra flags), the site, a
// CrawlPolicy whose default rule names the challenge marker, and an
// 8-member pool with loopback exits, spec.recycle and spec.cost, Ready.
func startBanCrawl(t *testing.T, extra ...string) *banCrawl {
	t.Helper()
	// The site bans one exit per banAfter pages, crawlPages/banAfter in
	// all: a long crawl of a strict site, for which decision 0413 says to
	// raise the site-ban bound (its default, 5, is tested in the chaos
	// suite's TestHostileSiteCannotRecycleThePool).
	siteBanBound := "--lease-site-ban-proxies=" + strconv.Itoa(2*crawlPages/banAfter)
	pt := newPoolTest(t, append([]string{"--local-loopback-exits", siteBanBound}, extra...)...)
	c := &banCrawl{pt: pt, site: antibot.Start(t, antibot.Options{BanAfter: banAfter, Seed: 7})}
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
		p.Spec.Cost = &crawlv1alpha1.PoolCost{Currency: "USD", PerInstanceHour: "0.50", PerGiB: "8.00"}
	}))
	eventually.Check(t, 3*time.Minute, interval, "8 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "crawl", exits) })
	return c
}

// client is Go's client through the gateway at gw, trusting roots for
// HTTPS (nil: the system's).
func (c *banCrawl) client(gw string, roots *x509.CertPool) *http.Client {
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword("ns-"+c.pt.ns+"+pool-crawl", "none"), Host: gw}
	return &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true,
	}}
}

// crawl fetches the 200 pages of base, re-queueing a page the gateway
// hands back as a ban (its retries were spent), as a crawler re-queues a
// failed request.
func (c *banCrawl) crawl(t *testing.T, crawler *http.Client, base string) {
	t.Helper()
	requeued, retried := 0, 0
	for page := range crawlPages {
		for try := 1; ; try++ {
			body, header, err := fetch(t.Context(), crawler, fmt.Sprintf("%s/page/%d", base, page))
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
	t.Logf("%d pages of %s fetched; %d answers took more than one attempt, %d pages re-queued by the crawler", crawlPages, base, retried, requeued)
}

// checkOutcomes: every banned address got exactly one answer past its
// budget (the ban) and no request after; status, kubectl and metrics
// tell the story.
func (c *banCrawl) checkOutcomes(t *testing.T) {
	t.Helper()
	pt := c.pt
	seen := c.site.Seen()
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
		case u.TransferredGiB == "":
			return fmt.Errorf("status.usage %+v: no transferredGiB", u)
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

// checkTransferred: the bytes the gateway moved for the pool, as its
// metric counts them, are the pool's status.usage.transferredGiB (to its
// six decimals), once every rotating lease is released; the cost holds
// them at spec.cost.perGiB.
func (c *banCrawl) checkTransferred(t *testing.T) {
	t.Helper()
	eventually.Check(t, time.Minute, interval, "status.usage.transferredGiB as the gateway counted", func(ctx context.Context) error {
		scraped, err := c.pt.gateway.Scrape(ctx)
		if err != nil {
			return err
		}
		moved, _ := scraped.Value("proxy_operator_gateway_bytes_total", map[string]string{"pool": "crawl"})
		p, err := c.pt.crawl.CrawlV1alpha1().ProxyPools(c.pt.ns).Get(ctx, "crawl", metav1.GetOptions{})
		if err != nil || p.Status.Usage == nil {
			return fmt.Errorf("no status.usage (%v)", err)
		}
		u := p.Status.Usage
		gib, _ := strconv.ParseFloat(u.TransferredGiB, 64)
		if moved == 0 || math.Abs(gib*(1<<30)-moved) > (1<<30)*1e-6 {
			return fmt.Errorf("status.usage.transferredGiB %q (%.0f bytes), the gateway moved %.0f bytes", u.TransferredGiB, gib*(1<<30), moved)
		}
		hours, _ := strconv.ParseFloat(u.InstanceHours, 64)
		if want := fmt.Sprintf("%.2f USD", hours*0.50+gib*8); u.Cost != want {
			return fmt.Errorf("status.usage.cost %q, want %q (instanceHours %s at 0.50, transferredGiB %s at 8.00)", u.Cost, want, u.InstanceHours, u.TransferredGiB)
		}
		t.Logf("the gateway moved %.0f bytes for the pool; status.usage.transferredGiB %s, cost %s", moved, u.TransferredGiB, u.Cost)
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
