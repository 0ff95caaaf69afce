package gatewayintegration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// concurrencyTarget is a site that records how many requests it serves at
// once: each takes hold before it answers.
type concurrencyTarget struct {
	srv      *httptest.Server
	mu       sync.Mutex
	inFlight int
	max      int
	served   int
}

func startConcurrencyTarget(t *testing.T, host string, hold time.Duration) *concurrencyTarget {
	ct := &concurrencyTarget{}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ct.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ct.mu.Lock()
		ct.inFlight++
		ct.max = max(ct.max, ct.inFlight)
		ct.mu.Unlock()
		time.Sleep(hold)
		ct.mu.Lock()
		ct.inFlight--
		ct.served++
		ct.mu.Unlock()
		fmt.Fprintln(w, "ok")
	})}}
	ct.srv.Start()
	t.Cleanup(ct.srv.Close)
	return ct
}

func (ct *concurrencyTarget) peak() (maxInFlight, served int) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.max, ct.served
}

// politeFleet is four open forward proxies taking ten leases each: forty
// slots, so that only the policy can hold the crawl to three at once.
func politeFleet(t *testing.T, h *harness) {
	for i := range 4 {
		u := h.addUpstream(t, fmt.Sprintf("polite-%d", i), "crawl", proxytest.StartInProcess(t, proxytest.Options{}), "", "", int64(10+i))
		obj, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(t.Context(), u.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Spec.MaxLeases = 10
		if _, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Update(t.Context(), obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "40 lease slots", func() bool {
		free := 0
		for _, p := range h.store.Proxies(h.ns, labels.Everything()) {
			free += int(p.FreeLeases)
		}
		return free == 40
	})
}

func (h *harness) createPolicy(t *testing.T, rules ...crawlv1alpha1.DomainRule) {
	t.Helper()
	p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Name: "polite"}, Spec: crawlv1alpha1.CrawlPolicySpec{Rules: rules}}
	if _, err := h.crawl.CrawlV1alpha1().CrawlPolicies(h.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCrawlPolicyHoldsTheFleetToThree: 20 workers at once on one site, 10
// with the Go client (acquire with wait, fetch through the proxy,
// release) and 10 curl processes through the gateway (one rotating lease
// per connection), under a rule of 3 concurrent leases for the site: the
// site never serves more than 3 at once, every request is served, and
// another site is granted at once meanwhile.
func TestCrawlPolicyHoldsTheFleetToThree(t *testing.T) {
	h := startHarness(t, "gw-polite", harnessOptions{wait: time.Minute})
	politeFleet(t, h)
	token := h.crawler(t, "crawler", true)
	site := startConcurrencyTarget(t, "127.0.0.1", 100*time.Millisecond)
	h.createPolicy(t, crawlv1alpha1.DomainRule{Host: "127.0.0.1", DomainLimits: crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To[int32](3)}})
	poll(t, "the policy in the store", func() bool {
		return len(h.store.CrawlPolicyStats(store.ObjectName{Namespace: h.ns, Name: "polite"})) == 1
	})

	lc, err := client.New(h.leaseURL, client.WithToken(func(context.Context) (string, error) { return token, nil }))
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w := range 10 {
		wg.Go(func() {
			for r := range rounds {
				l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("go-%d-%d", w, r), Namespace: h.ns, Domain: "127.0.0.1", Wait: time.Minute})
				if err != nil {
					errs <- fmt.Errorf("go worker %d: %w", w, err)
					return
				}
				proxyURL, _ := url.Parse(l.Proxy.URL)
				c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 30 * time.Second}
				resp, err := c.Get(site.srv.URL + "/")
				if err == nil {
					resp.Body.Close()
				}
				if relErr := lc.Release(context.WithoutCancel(t.Context()), l.ID, client.OutcomeOK, ""); relErr != nil || err != nil {
					errs <- fmt.Errorf("go worker %d: fetch %v, release %v", w, err, relErr)
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				if r := curl(t, h.gatewayURL("ns-"+h.ns+"+pool-crawl", token), site.srv.URL+"/"); r.status != http.StatusOK {
					errs <- fmt.Errorf("curl worker %d: %d", w, r.status)
				}
			}
		})
	}
	// Meanwhile another site is not held back: granted without waiting.
	time.Sleep(300 * time.Millisecond)
	other, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "other-site", Namespace: h.ns, Domain: "localhost"})
	if err != nil {
		t.Errorf("acquire for another domain while the site's budget is used: %v", err)
	} else if err := lc.Release(t.Context(), other.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak, served := site.peak()
	t.Logf("20 workers × %d requests: %d served, at most %d at once", rounds, served, peak)
	if peak > 3 || served != 20*rounds {
		t.Errorf("the site served %d requests, at most %d at once; want %d, never more than 3", served, peak, 20*rounds)
	}
	if peak < 2 {
		t.Errorf("at most %d at once: the workers never overlapped, so the limit was not tested", peak)
	}
	// The gateway releases a rotating lease once its tunnel has closed, a
	// lease API call that may land after curl has its answer: wait for the
	// last releases (the check below names what is left).
	stats := h.store.CrawlPolicyStats(store.ObjectName{Namespace: h.ns, Name: "polite"})
	_ = proxytest.Poll(10*time.Second, func() bool {
		stats = h.store.CrawlPolicyStats(store.ObjectName{Namespace: h.ns, Name: "polite"})
		return len(stats) == 1 && stats[0].InUse == 0
	})
	if len(stats) != 1 || stats[0].Waited == 0 || stats[0].InUse != 0 {
		t.Errorf("rule stats %+v: want waits counted and nothing in use after the crawl", stats)
	}
}

// TestCrawlPolicyMinInterval: 10 Go workers acquire for one site under a
// 200 ms minimum interval: no two grants closer than that.
func TestCrawlPolicyMinInterval(t *testing.T) {
	h := startHarness(t, "gw-interval", harnessOptions{})
	politeFleet(t, h)
	token := h.crawler(t, "crawler", true)
	h.createPolicy(t, crawlv1alpha1.DomainRule{Host: "shop.example", DomainLimits: crawlv1alpha1.DomainLimits{MinInterval: &metav1.Duration{Duration: 200 * time.Millisecond}}})
	poll(t, "the policy in the store", func() bool {
		return len(h.store.CrawlPolicyStats(store.ObjectName{Namespace: h.ns, Name: "polite"})) == 1
	})
	lc, err := client.New(h.leaseURL, client.WithToken(func(context.Context) (string, error) { return token, nil }))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		granted []time.Time
		wg      sync.WaitGroup
	)
	for w := range 10 {
		wg.Go(func() {
			for r := range 2 {
				l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("w-%d-%d", w, r), Namespace: h.ns, Domain: "shop.example", Wait: 30 * time.Second})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				mu.Lock()
				granted = append(granted, l.GrantedAt)
				mu.Unlock()
				_ = lc.Release(t.Context(), l.ID, client.OutcomeOK, "")
			}
		})
	}
	wg.Wait()
	slices.SortFunc(granted, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(granted); i++ {
		if gap := granted[i].Sub(granted[i-1]); gap < 200*time.Millisecond {
			t.Errorf("grants %d and %d %v apart, want at least 200ms", i-1, i, gap)
		}
	}
	if len(granted) != 20 {
		t.Errorf("%d grants, want 20", len(granted))
	}
	// Without wait, the next one inside the interval is a 429 naming when.
	_, err = lc.Acquire(t.Context(), client.AcquireRequest{Holder: "eager", Namespace: h.ns, Domain: "shop.example"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "DomainLimited" || apiErr.RetryAfter <= 0 {
		t.Errorf("acquire inside the interval without wait: %v; want 429 DomainLimited with Retry-After", err)
	}
}
