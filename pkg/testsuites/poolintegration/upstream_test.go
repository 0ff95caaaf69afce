package poolintegration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"

	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// The vendor's account in these tests: squid as its super proxy admits
// only usernames of this shape and this password, and sends each session
// out from its own loopback address (proxytest.StartVendorSquid).
const (
	vendorPassword = "vendor-pw-7f3a9c"
	vendorTemplate = "customer-acme-zone-res-country-{country}-session-{session}"
	vendorPattern  = `customer-acme-zone-res-country-(?:us|de)-session-([0-9a-f]{16})`
)

// echoServer answers every request with the address it came from: the
// exit IP a site would see.
func echoServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(echoClientAddress))
	t.Cleanup(srv.Close)
	return srv.URL
}

func echoClientAddress(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	fmt.Fprintln(w, host)
}

// upstreamSpec is a Proxy spec for a session of the vendor at addr.
func upstreamSpec(t *testing.T, vendorAddr, echo, secret, template string) crawlv1alpha1.ProxySpec {
	host, port, err := net.SplitHostPort(vendorAddr)
	if err != nil {
		t.Fatal(err)
	}
	var p int32
	fmt.Sscan(port, &p)
	hc := fastHealthCheck(echo)
	hc.URL, hc.ExpectedStatus, hc.ExitIPFromBody = echo+"/ip", 200, true
	return crawlv1alpha1.ProxySpec{
		Provider: crawlv1alpha1.ProviderUpstream,
		Upstream: &crawlv1alpha1.UpstreamProvider{
			Endpoint:             crawlv1alpha1.Endpoint{Host: host, Port: p},
			CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: secret},
			UsernameTemplate:     template,
			Countries:            []string{"us", "de"},
		},
		HealthCheck: hc,
	}
}

// exitIPs is member name → status.exitIP of the pool's Ready members.
func (pt *poolTest) exitIPs(ctx context.Context, pool string) (map[string]string, error) {
	ms, err := pt.members(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		if m.Status.Phase == crawlv1alpha1.PhaseReady && m.DeletionTimestamp == nil {
			out[m.Name] = m.Status.ExitIP
		}
	}
	return out, nil
}

// distinctExitIPs is nil once the pool is settled at n members whose exit
// IPs are n distinct addresses of the vendor's.
func (pt *poolTest) distinctExitIPs(ctx context.Context, pool string, n int, vendorIPs []string) (map[string]string, error) {
	if err := pt.settled(ctx, pool, n); err != nil {
		return nil, err
	}
	ips, err := pt.exitIPs(ctx, pool)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for name, ip := range ips {
		if !slices.Contains(vendorIPs, ip) {
			return nil, fmt.Errorf("member %s: exit IP %q is not one of the vendor's %v", name, ip, vendorIPs)
		}
		seen[ip] = true
	}
	if len(seen) != n {
		return nil, fmt.Errorf("exit IPs %v: want %d distinct", ips, n)
	}
	return ips, nil
}

// sessionOf is the session id in a member's providerID (upstream://host:port/session).
func sessionOf(p *crawlv1alpha1.Proxy) string {
	return p.Status.ProviderID[strings.LastIndex(p.Status.ProviderID, "/")+1:]
}

// TestUpstreamPoolIsOneExitIPPerMember: a pool of 4 sessions of a proxy
// network (squid as the super proxy) shows 4 distinct exit IPs in status
// and in kubectl get; a lease through the gateway leaves from its member's
// exit IP; a member banned for a domain is recycled into a new session and
// a new IP; a member forced onto another's exit IP is re-rolled; the
// vendor's password appears in no status, event or log.
func TestUpstreamPoolIsOneExitIPPerMember(t *testing.T) {
	t.Parallel()
	vendor := proxytest.StartVendorSquid(t, proxytest.VendorOptions{UsernamePattern: vendorPattern, Password: vendorPassword, ExitIPs: 12})
	echo := echoServer(t)
	pt := newPoolTest(t, "--providers=upstream")
	gw := pt.startGateway()
	pt.createCredentialsSecret("vendor", map[string]string{"password": vendorPassword})
	pt.create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "res"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](4),
			Template: crawlv1alpha1.ProxyTemplate{Spec: upstreamSpec(t, vendor.Addr, echo, "vendor", vendorTemplate)},
			Strategy: crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
			Recycle:  &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](1)},
		},
	})
	var ips map[string]string
	eventually.Check(t, 2*time.Minute, interval, "4 Ready members on 4 distinct exit IPs", func(ctx context.Context) (err error) {
		ips, err = pt.distinctExitIPs(ctx, "res", 4, vendor.ExitIPs())
		return err
	})
	t.Logf("exit IPs: %v", ips)
	out, err := pt.kubectl(t.Context(), "get", "px", "-l", crawlv1alpha1.PoolLabel+"=res")
	if err != nil {
		t.Fatal(err)
	}
	for name, ip := range ips {
		if !strings.Contains(out, name) || !strings.Contains(out, ip) {
			t.Errorf("kubectl get px does not show %s with exit IP %s:\n%s", name, ip, out)
		}
	}

	// Through the gateway: the target sees the leased member's exit IP.
	body, err := exec.CommandContext(t.Context(), "curl", "-sS", "--fail", "-m", "20", "-x", "http://ns-"+pt.ns+"+pool-res+session-s1:none@"+gw, echo+"/ip").Output()
	if err != nil {
		t.Fatalf("curl through the gateway: %v", err)
	}
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lc.Leases(t.Context(), client.LeasesFilter{Namespace: pt.ns})
	if err != nil || len(held) != 1 {
		t.Fatalf("leases after one gateway session: %v, %v; want the session's one", held, err)
	}
	if got, want := strings.TrimSpace(string(body)), ips[held[0].Proxy.Name]; got != want {
		t.Errorf("through the gateway the target saw %s; the session's member %s has exit IP %s", got, held[0].Proxy.Name, want)
	}
	// The network bills per GB: the gateway's bytes are counted per pool.
	scraped, err := pt.gateway.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := scraped.Value("proxy_operator_gateway_bytes_total", map[string]string{"direction": "down", "namespace": pt.ns, "pool": "res"}); v < float64(len(body)) {
		t.Errorf("proxy_operator_gateway_bytes_total{direction=down,pool=res} = %v, want at least the %d bytes of the answer", v, len(body))
	}

	// A ban recycles the member: its successor is a new session, a new IP.
	l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "banner", Namespace: pt.ns, Selector: crawlv1alpha1.PoolLabel + "=res", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	banned := l.Proxy.Name
	if err := lc.Release(t.Context(), l.ID, client.OutcomeBanned, "shop.example"); err != nil {
		t.Fatal(err)
	}
	before := ips
	eventually.Check(t, 2*time.Minute, interval, banned+" recycled into a new exit IP", func(ctx context.Context) (err error) {
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, banned, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", banned, err)
		}
		ips, err = pt.distinctExitIPs(ctx, "res", 4, vendor.ExitIPs())
		return err
	})
	for name, ip := range ips {
		if _, old := before[name]; !old && ip == before[banned] {
			t.Errorf("the successor %s of the banned %s left from its exit IP %s", name, banned, ip)
		}
	}

	// Forced onto another member's IP, a member is re-rolled.
	ms, err := pt.members(t.Context(), "res")
	if err != nil {
		t.Fatal(err)
	}
	// The youngest member no lease holds (the gateway's session keeps one:
	// its drain would wait for the lease), forced onto the oldest's IP.
	slices.SortFunc(ms, func(a, b crawlv1alpha1.Proxy) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	ms = slices.DeleteFunc(ms, func(m crawlv1alpha1.Proxy) bool { return m.Name == held[0].Proxy.Name })
	older, younger := ms[0], ms[len(ms)-1]
	vendor.Force(t, sessionOf(&younger), older.Status.ExitIP)
	eventually.Check(t, 2*time.Minute, interval, younger.Name+" re-rolled off "+older.Name+"'s exit IP", func(ctx context.Context) (err error) {
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, younger.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", younger.Name, err)
		}
		_, err = pt.distinctExitIPs(ctx, "res", 4, vendor.ExitIPs())
		return err
	})
	events, err := pt.kube.CoreV1().Events(pt.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !eventSays(events.Items, younger.Name, "exit IP "+older.Status.ExitIP) {
		var msgs []string
		for _, e := range events.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		t.Errorf("no event says %s was re-rolled for %s's exit IP %s; events:\n%s", younger.Name, older.Name, older.Status.ExitIP, strings.Join(msgs, "\n"))
	}
	pt.noPasswordShown(t, vendorPassword, events.Items)
}

// TestUpstreamRefusalSaysWhy: a wrong password or a username of the wrong
// shape keeps the session from Ready with a condition that names the
// fields to check, never the password; fixing the Secret heals it.
func TestUpstreamRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	vendor := proxytest.StartVendorSquid(t, proxytest.VendorOptions{UsernamePattern: vendorPattern, Password: vendorPassword, ExitIPs: 4})
	echo := echoServer(t)
	pt := newPoolTest(t, "--providers=upstream")
	const wrong = "not-the-vendor-pw-41d2"
	pt.createCredentialsSecret("wrong", map[string]string{"password": wrong})
	pt.createCredentialsSecret("vendor", map[string]string{"password": vendorPassword})
	for name, spec := range map[string]crawlv1alpha1.ProxySpec{
		"wrong-password": upstreamSpec(t, vendor.Addr, echo, "wrong", vendorTemplate),
		"wrong-template": upstreamSpec(t, vendor.Addr, echo, "vendor", "customer-acme-session-{session}"),
	} {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"wrong-password", "wrong-template"} {
		eventually.Check(t, time.Minute, interval, name+": Unhealthy, saying why", func(ctx context.Context) error {
			p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
			if p.Status.Phase != crawlv1alpha1.PhaseUnhealthy || c == nil || !strings.Contains(c.Message, "407") ||
				!strings.Contains(c.Message, "spec.upstream.usernameTemplate") {
				return fmt.Errorf("phase %s, Healthy %+v", p.Status.Phase, c)
			}
			return nil
		})
	}
	pt.updateSecret("wrong", map[string]string{"password": vendorPassword})
	eventually.Check(t, time.Minute, interval, "wrong-password Ready once the Secret is fixed", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, "wrong-password", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != crawlv1alpha1.PhaseReady || p.Status.ExitIP == "" {
			return fmt.Errorf("phase %s, exit IP %q", p.Status.Phase, p.Status.ExitIP)
		}
		return nil
	})
	events, err := pt.kube.CoreV1().Events(pt.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pt.noPasswordShown(t, wrong, events.Items)
	pt.noPasswordShown(t, vendorPassword, events.Items)
}

// eventSays: an event about object (on it, or naming it) says text.
func eventSays(events []corev1.Event, object, text string) bool {
	for _, e := range events {
		if (e.InvolvedObject.Name == object || strings.Contains(e.Message, object)) && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// noPasswordShown fails when password is in any Proxy's status, any event,
// the operator's log or the gateway's.
func (pt *poolTest) noPasswordShown(t *testing.T, password string, events []corev1.Event) {
	t.Helper()
	var where []string
	proxies, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies.Items {
		if strings.Contains(fmt.Sprintf("%+v", p.Status), password) {
			where = append(where, "status of "+p.Name)
		}
	}
	for _, e := range events {
		if strings.Contains(e.Message, password) {
			where = append(where, "event "+e.Reason)
		}
	}
	if strings.Contains(pt.op.Logs(), password) {
		where = append(where, "the operator's log")
	}
	if pt.gateway != nil && strings.Contains(pt.gateway.Logs(), password) {
		where = append(where, "the gateway's log")
	}
	if len(where) > 0 {
		t.Error(errors.New("the vendor's password appears in " + strings.Join(where, ", ")))
	}
}

// TestScrapyCrawlsOwnAndNetworkIPs runs examples/scrapy through the gateway
// with only the ns- term over a namespace that holds a pool of the
// operator's own forward-proxies and a pool of a proxy network's sessions
// (examples/pool-mixed.yaml's setup): its four download slots (four target
// hosts) take the four members, so the target sees both kinds of exit IP.
// Unmodified Scrapy crawls through the gateway whether the upstream checks
// lease credentials (the own pool's, LeaseBound: the gateway renews and
// carries them) or not (the network's, gateway-only: the lease API refuses
// a crawler's own acquire of one, and the vendor's password reaches only
// the gateway).
func TestScrapyCrawlsOwnAndNetworkIPs(t *testing.T) {
	t.Parallel()
	const scrapyBin = "/usr/bin/scrapy"
	integration.Needs(t, "scrapy from Debian (`make deps`)")
	if _, err := exec.LookPath(scrapyBin); err != nil {
		t.Fatalf("%s: %v (install the test peers: make deps)", scrapyBin, err)
	}
	vendor := proxytest.StartVendorSquid(t, proxytest.VendorOptions{UsernamePattern: vendorPattern, Password: vendorPassword, ExitIPs: 4})
	echo := echoServer(t)
	// The same echo on three more loopback hosts: one download slot each.
	hosts := []string{echo}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(echoClientAddress)}}
		srv.Start()
		t.Cleanup(srv.Close)
		hosts = append(hosts, srv.URL)
	}
	pt := newPoolTest(t, "--providers=local,upstream")
	gw := pt.startGateway()
	pt.createCredentialsSecret("vendor", map[string]string{"password": vendorPassword})
	pt.create(newPool("own", 2, proxytest.StartHTTPTarget(t).URL))
	pt.create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "residential"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](2),
			Template: crawlv1alpha1.ProxyTemplate{
				Metadata: crawlv1alpha1.TemplateMetadata{Labels: map[string]string{crawlv1alpha1.GatewayOnlyLabel: "true"}},
				Spec:     upstreamSpec(t, vendor.Addr, echo, "vendor", vendorTemplate),
			},
		},
	})
	for _, pool := range []string{"own", "residential"} {
		eventually.Check(t, 2*time.Minute, interval, "pool "+pool+" Ready", func(ctx context.Context) error { return pt.settled(ctx, pool, 2) })
	}
	for pool, want := range map[string]metav1.ConditionStatus{"own": metav1.ConditionTrue, "residential": metav1.ConditionFalse} {
		eventually.Check(t, time.Minute, interval, "pool "+pool+"'s LeaseBound "+string(want), func(ctx context.Context) error {
			ms, err := pt.members(ctx, pool)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if c := meta.FindStatusCondition(m.Status.Conditions, crawlv1alpha1.ConditionLeaseBound); c == nil || c.Status != want {
					return fmt.Errorf("member %s: LeaseBound %+v", m.Name, c)
				}
			}
			return nil
		})
	}
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lc.Acquire(t.Context(), client.AcquireRequest{Holder: "direct", Namespace: pt.ns, Selector: crawlv1alpha1.PoolLabel + "=residential"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || apiErr.Code != "GatewayOnly" {
		t.Errorf("a crawler's own acquire of a gateway-only member: %v, want 403 GatewayOnly", err)
	}

	out := filepath.Join(t.TempDir(), "items.json")
	var urls []string
	for _, h := range hosts {
		urls = append(urls, h+"/ip")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, scrapyBin, "crawl", "fleet", "-O", out)
	cmd.Dir = filepath.Join(testenv.RepoRoot(t), "examples", "scrapy")
	cmd.Env = append(os.Environ(), "GATEWAY="+gw, "GATEWAY_TOKEN=none", "GATEWAY_NAMESPACE="+pt.ns,
		"LEASE_API=http://"+pt.op.LeaseAddr, "START_URLS="+strings.Join(urls, " "), "PYTHONDONTWRITEBYTECODE=1")
	logs, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scrapy crawl: %v\n%s", err, logs)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var items []struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal(data, &items); err != nil || len(items) != len(urls) {
		t.Fatalf("items %s (%v): want %d\n%s", data, err, len(urls), logs)
	}
	own, network := 0, 0
	for _, it := range items {
		switch {
		case it.Status != http.StatusOK:
			t.Errorf("item %+v", it)
		case it.Body == "127.0.0.1":
			own++
		case slices.Contains(vendor.ExitIPs(), it.Body):
			network++
		default:
			t.Errorf("item %+v left from neither kind of IP", it)
		}
	}
	if own != 2 || network != 2 {
		t.Errorf("the crawl left %d times from own IPs and %d from the network's, want 2 and 2 (one slot per member):\n%s", own, network, data)
	}
	if strings.Contains(string(logs), vendorPassword) || strings.Contains(string(data), vendorPassword) {
		t.Error("the vendor's password appears in Scrapy's log or items")
	}
}
