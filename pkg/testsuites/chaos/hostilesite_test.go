package chaos_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/crawlpolicy"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// hostileBound is the test's --lease-site-ban-proxies.
const hostileBound = 3

// hostileSite answers 403 to everything and remembers which exit
// addresses it has seen (each pool member leaves from its own,
// --local-loopback-exits): every request it gets is one proxy it bans.
type hostileSite struct {
	srv   *httptest.Server
	mu    sync.Mutex
	exits map[string]int
}

func startHostileSite(t *testing.T) *hostileSite {
	t.Helper()
	s := &hostileSite{exits: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		s.mu.Lock()
		s.exits[host]++
		s.mu.Unlock()
		http.Error(w, "403 go away", http.StatusForbidden)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *hostileSite) seen() (exits, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.exits {
		requests += n
	}
	return len(s.exits), requests
}

// crawlAnswer is how the gateway answered one request.
type crawlAnswer struct {
	status                int
	banned, reason, retry string
	body                  string
}

// TestHostileSiteCannotRecycleThePool is issue 64's site: it answers 403
// to everything, and a crawler fetches from it through two gateway
// replicas, one request every 200 ms, ignoring what it is told, for 15 s
// (5 minutes in `make chaos`) over a pool of 8 members that are recycled
// at their first banned domain (maxBannedDomains 1). The operator runs
// with --lease-site-ban-proxies=3 and a window longer than the crawl: the
// site bans 3 members, the pool recycles exactly those (no more than the
// bound), every later request is answered 429 site_banning naming the
// site, and the CrawlPolicy that governs it gets a SiteBanning event.
// Before the bound, the site banned every member the gateway leased, and
// the pool recycled member after member.
func TestHostileSiteCannotRecycleThePool(t *testing.T) {
	crawlFor := integration.Scaled(15*time.Second, 5*time.Minute)
	window := integration.Scaled(time.Minute, 10*time.Minute)
	const members = 8
	ns := newNamespace(t)
	stateDir := t.TempDir()
	t.Cleanup(func() { killForwardProxies(t, stateDir) })
	_, crawl := clients(t)
	op := startOperator(t, "operator-0", ns, "--providers=local", "--local-state-dir="+stateDir, "--local-loopback-exits",
		"--lease-site-ban-proxies="+strconv.Itoa(hostileBound), "--lease-site-ban-window="+window.String())
	health := proxytest.StartHTTPTarget(t)
	site := startHostileSite(t)

	policy := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Name: "polite"}, Spec: crawlv1alpha1.CrawlPolicySpec{
		Default: &crawlv1alpha1.DomainLimits{BanDetection: &crawlv1alpha1.BanDetection{StatusCodes: []int32{403}}}}}
	if _, err := crawl.CrawlV1alpha1().CrawlPolicies(ns).Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "crawl"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](members),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, HealthCheck: fastHealthCheck(health.URL)}},
			Strategy: crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(members)), MaxUnavailable: ptr.To(intstr.FromInt32(members))},
			Recycle:  &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](1)},
		},
	}
	if _, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(t.Context(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readyMembers := func(ctx context.Context) (map[string]bool, error) {
		list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolLabel + "=crawl"})
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for _, p := range list.Items {
			names[p.Name] = p.Status.Phase == crawlv1alpha1.PhaseReady && p.DeletionTimestamp == nil
		}
		return names, nil
	}
	settled := func(ctx context.Context) error {
		names, err := readyMembers(ctx)
		if err != nil {
			return err
		}
		ready := 0
		for _, r := range names {
			if r {
				ready++
			}
		}
		if len(names) != members || ready != members {
			return fmt.Errorf("%d members, %d Ready", len(names), ready)
		}
		return nil
	}
	eventually.Check(t, 2*time.Minute, pollInterval, "8 Ready members", settled)
	first, err := readyMembers(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// Two replicas of the gateway tier, one lease API: the bound is the
	// store's, whichever replica relays.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig") // the CrawlPolicies' ban rules
	if err := shared.Get(t).Env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	var gateways []*operatortest.Process
	for i := range 2 {
		gw := operatortest.Start(t, operatortest.ProcessOptions{
			Binary: shared.Get(t).Binary, Name: fmt.Sprintf("gateway-%d", i), Gateway: true, LogsEnv: "CHAOS_LOGS",
			Args: []string{"--lease-url=http://" + op.LeaseAddr, "--lease-auth=none", "--drain-delay=0s", "--kubeconfig=" + kubeconfig},
		})
		eventually.Check(t, time.Minute, pollInterval, gw.Name+" reaches the leader", func(ctx context.Context) error {
			if status, body, err := gw.Get(ctx, "/readyz"); err != nil || status != http.StatusOK {
				return fmt.Errorf("/readyz: %d %s %v", status, body, err)
			}
			return nil
		})
		gateways = append(gateways, gw)
	}

	answers := crawlHostileSite(t, gateways, "ns-"+ns+"+pool-crawl", site.srv.URL+"/", crawlFor)

	// What the crawler was told: the site's 403 (judged banned, after its
	// retries ran out) until the bound was reached, then 429 site_banning
	// naming the site, never anything else.
	var banned, refused int
	for i, a := range answers {
		switch {
		case a.status == http.StatusForbidden && a.banned != "":
			banned++
		case a.status == http.StatusTooManyRequests && a.reason == "site_banning" && a.retry != "" &&
			strings.Contains(a.body, fmt.Sprintf("banned %d distinct proxies of this namespace within %v", hostileBound, window)):
			refused++
		default:
			t.Errorf("answer %d of %d: %d %s=%q %s=%q: %q; want a judged 403 or 429 site_banning naming the site",
				i, len(answers), a.status, gateway.HeaderBanned, a.banned, gateway.HeaderError, a.reason, a.body)
		}
	}
	if refused == 0 {
		t.Errorf("%d answers, none a 429 site_banning: the crawler was never told", len(answers))
	}
	exits, requests := site.seen()
	if exits > hostileBound {
		t.Errorf("the site banned %d members (%d requests), want at most the bound %d", exits, requests, hostileBound)
	}

	// The pool recycles the members the site banned, and no more.
	var burned int64
	eventually.Check(t, 2*time.Minute, pollInterval, "the banned members recycled and 8 Ready", func(ctx context.Context) error {
		p, err := crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, "crawl", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if burned = p.Status.Recycled.Burned; burned != int64(exits) {
			return fmt.Errorf("%d burned, the site banned %d", burned, exits)
		}
		return settled(ctx)
	})
	now, err := readyMembers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for name := range first {
		if now[name] {
			kept++
		}
	}
	if burned > hostileBound || kept < members-hostileBound {
		t.Errorf("%d members burned, %d of the first 8 kept; want at most %d burned", burned, kept, hostileBound)
	}

	// The operator hears of it on the CrawlPolicy that governs the site.
	eventually.Check(t, 30*time.Second, pollInterval, "a SiteBanning event on the CrawlPolicy", func(ctx context.Context) error {
		kube, _ := clients(t)
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "CrawlPolicy" && e.InvolvedObject.Name == "polite" && e.Reason == crawlpolicy.ReasonSiteBanning &&
				strings.Contains(e.Message, fmt.Sprintf("banned %d distinct proxies", hostileBound)) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(evs.Items))
	})
	t.Logf("over %v: %d answers, %d judged 403s, %d 429 site_banning; the site saw %d requests from %d members; %d members burned, %d of the first 8 kept",
		crawlFor, len(answers), banned, refused, requests, exits, burned, kept)
}

// crawlHostileSite fetches target through the gateways in turn, one
// request every 200 ms, for d, and returns what each answered.
func crawlHostileSite(t *testing.T, gateways []*operatortest.Process, username, target string, d time.Duration) []crawlAnswer {
	t.Helper()
	var clients []*http.Client
	for _, gw := range gateways {
		proxy := &url.URL{Scheme: "http", Host: gw.LeaseAddr, User: url.UserPassword(username, "ignored")}
		clients = append(clients, &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 30 * time.Second})
	}
	var out []crawlAnswer
	tick := time.NewTicker(200 * time.Millisecond) // the crawler's pace, not a wait for anything
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		resp, err := clients[len(out)%len(clients)].Get(target)
		if err != nil {
			t.Fatalf("request %d through the gateway: %v", len(out), err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		out = append(out, crawlAnswer{status: resp.StatusCode, banned: resp.Header.Get(gateway.HeaderBanned),
			reason: resp.Header.Get(gateway.HeaderError), retry: resp.Header.Get("Retry-After"), body: string(body)})
	}
	return out
}
