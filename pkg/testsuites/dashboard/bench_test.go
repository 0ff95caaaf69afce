package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

// The benchmarks serve pkg/dashboard in this process, fed a synthetic fleet
// (no API server: what is measured is the view, the stream and the page),
// with --lease-auth=none's authenticator.

// syntheticFleet is pools pools of perPool Ready members each, and one
// lease on every tenth member; desired of pool-00 is firstDesired.
func syntheticFleet(pools, perPool int, firstDesired int32) dashboard.Inputs {
	in := dashboard.Inputs{LeasesKnown: true}
	created := metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	for p := range pools {
		name := fmt.Sprintf("pool-%02d", p)
		desired := int32(perPool)
		if p == 0 {
			desired = firstDesired
		}
		in.Pools = append(in.Pools, &crawlv1alpha1.ProxyPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To(desired),
				Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}}},
			Status: crawlv1alpha1.ProxyPoolStatus{Replicas: int32(perPool), ReadyReplicas: int32(perPool), AvailableReplicas: int32(perPool)},
		})
		for m := range perPool {
			member := fmt.Sprintf("%s-%04d", name, m)
			in.Proxies = append(in.Proxies, &crawlv1alpha1.Proxy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: member, CreationTimestamp: created,
					Labels: map[string]string{crawlv1alpha1.PoolLabel: name}},
				Status: crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, ExitIP: fmt.Sprintf("203.0.%d.%d", p, m%250), LatencyMillis: int64(10 + m%90)},
			})
			if m%10 == 0 {
				in.Leases = append(in.Leases, dashboard.Lease{Namespace: "bench", Proxy: member, Holder: "crawler", Domain: "example.com", GrantedAt: created.Time})
			}
		}
	}
	return in
}

// syntheticServer serves the dashboard over a fleet the benchmark changes.
type syntheticServer struct {
	URL string
	hub *dashboard.Hub
	mu  sync.Mutex
	in  dashboard.Inputs
}

func (s *syntheticServer) set(in dashboard.Inputs) {
	s.mu.Lock()
	s.in = in
	s.mu.Unlock()
	s.hub.Poke()
}

func serveSynthetic(b *testing.B, in dashboard.Inputs) *syntheticServer {
	b.Helper()
	s := &syntheticServer{in: in}
	s.hub = dashboard.NewHub(dashboard.HubConfig{Inputs: func() dashboard.Inputs { s.mu.Lock(); defer s.mu.Unlock(); return s.in }})
	none := auth.None{} // --lease-auth=none, without its start-up warning
	h, err := dashboard.NewHandler(dashboard.Config{Hub: s.hub, Authenticator: none, Authorizer: none})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, serve := range h.Routes() {
		mux.HandleFunc(pattern, serve)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.hub.Run(ctx) }()
	srv := httptest.NewServer(mux)
	b.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	s.URL = srv.URL
	deadline := time.Now().Add(time.Minute)
	for _, version, _ := s.hub.Current(); version == 0; _, version, _ = s.hub.Current() {
		if time.Now().After(deadline) {
			b.Fatal("the hub published no view")
		}
		runtime.Gosched()
	}
	return s
}

// untilPoolRow is a page expression that resolves, with the page's clock
// (ms since navigation), once pool-00's row shows desired.
func untilPoolRow(desired int32) string {
	return fmt.Sprintf(`new Promise((resolve) => {
		const look = () => {
			const rows = document.querySelectorAll('#pools tbody tr');
			if (rows.length === 50 && rows[0].cells[2].textContent === '%d') resolve(performance.now());
			else setTimeout(look, 2);
		};
		look();
	})`, desired)
}

func await(b *testing.B, ctx context.Context, js string) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkFleetViewLoad: the fleet view of 10,000 proxies in 50 pools,
// from navigation to the 50 pool rows on screen in headless chromium
// (page load, sign-in check, the stream's first view of ~2 MB, render).
func BenchmarkFleetViewLoad(b *testing.B) {
	s := serveSynthetic(b, syntheticFleet(50, 200, 200))
	ctx, _ := newPage(b)
	var total float64
	for b.Loop() {
		do(b, ctx, chromedp.Navigate(s.URL+"/ui/"))
		total += await(b, ctx, untilPoolRow(200))
	}
	b.ReportMetric(total/float64(b.N), "ms-to-fleet/op")
}

// BenchmarkStatusChangeVisible: with the fleet view of 10,000 proxies open,
// from a change in the inputs (an informer's poke) to the changed row on
// screen: the hub's debounce (200ms), the rebuild, the stream, the render.
func BenchmarkStatusChangeVisible(b *testing.B) {
	s := serveSynthetic(b, syntheticFleet(50, 200, 200))
	ctx, _ := newPage(b)
	do(b, ctx, chromedp.Navigate(s.URL+"/ui/"))
	await(b, ctx, untilPoolRow(200))
	desired := int32(200)
	for b.Loop() {
		desired++
		s.set(syntheticFleet(50, 200, desired))
		await(b, ctx, untilPoolRow(desired))
	}
}

// BenchmarkMemoryWith20Dashboards: the process's heap in use with a fleet
// of 10,000 proxies and no viewer, then with 20 streams open that have each
// taken the first view and one update. Reported as heap-MB-0 and
// heap-MB-20 (after a GC); the hub holds one view for all.
func BenchmarkMemoryWith20Dashboards(b *testing.B) {
	for b.Loop() {
		s := serveSynthetic(b, syntheticFleet(50, 200, 200))
		before := heapInUse()
		var streams []*bufio.Reader
		var bodies []func() error
		for range 20 {
			resp, err := http.Get(s.URL + "/ui/api/stream")
			if err != nil {
				b.Fatal(err)
			}
			bodies = append(bodies, resp.Body.Close)
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			readView(b, r)
			streams = append(streams, r)
		}
		s.set(syntheticFleet(50, 200, 201))
		for _, r := range streams {
			readView(b, r)
		}
		after := heapInUse()
		b.ReportMetric(before/(1<<20), "heap-MB-0")
		b.ReportMetric(after/(1<<20), "heap-MB-20")
		for _, close := range bodies {
			_ = close()
		}
	}
}

// readView reads one "event: view" of a stream, discarding it.
func readView(b *testing.B, r *bufio.Reader) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			return
		}
	}
}

func heapInUse() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse)
}
