package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
)

// newProxy is the i-th External proxy, at the fleet listener addr. Its
// probe URL is never dialled: the fleet's listeners answer 204 themselves.
func newProxy(ns string, i int, addr string, interval time.Duration) *crawlv1alpha1.Proxy {
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("px-%05d", i)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: int32(portNum)},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:            "http://127.0.0.1:9/generate_204",
				ExpectedStatus: http.StatusNoContent,
				Interval:       &metav1.Duration{Duration: interval},
				Timeout:        &metav1.Duration{Duration: min(5*time.Second, interval/2)},
			},
		},
	}
}

// readyWatcher follows the phases of a namespace's proxies through a watch
// (not polling lists, which would load the API server it measures).
type readyWatcher struct {
	want     int
	stopCh   chan struct{}
	factory  crawlinformers.SharedInformerFactory
	allReady chan struct{} // closed when want proxies are Ready
	readyAt  time.Time     // set before allReady closes

	mu     sync.Mutex
	phases map[string]crawlv1alpha1.ProxyPhase
	ready  int
}

func (b *bench) watchReady(ctx context.Context, ns string, want int) (*readyWatcher, error) {
	w := &readyWatcher{want: want, stopCh: make(chan struct{}), allReady: make(chan struct{}),
		phases: map[string]crawlv1alpha1.ProxyPhase{}}
	w.factory = crawlinformers.NewSharedInformerFactoryWithOptions(b.crawl, 0, crawlinformers.WithNamespace(ns))
	informer := w.factory.Crawl().V1alpha1().Proxies().Informer()
	observe := func(obj any) {
		if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
			w.observe(p.Name, p.Status.Phase)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, err
	}
	w.factory.Start(w.stopCh)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		w.stop()
		return nil, errors.New("the proxy informer did not sync")
	}
	return w, nil
}

func (w *readyWatcher) observe(name string, phase crawlv1alpha1.ProxyPhase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phases[name] == crawlv1alpha1.PhaseReady {
		w.ready--
	}
	w.phases[name] = phase
	if phase == crawlv1alpha1.PhaseReady {
		w.ready++
	}
	if w.ready == w.want && w.readyAt.IsZero() {
		w.readyAt = time.Now()
		close(w.allReady)
	}
}

// summary counts the proxies by phase: "812 Ready, 188 Pending of 1000".
func (w *readyWatcher) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := map[string]int{}
	for _, phase := range w.phases {
		counts[string(phase)]++
	}
	var parts []string
	for _, phase := range slices.Sorted(maps.Keys(counts)) {
		name := phase
		if name == "" {
			name = "no phase yet"
		}
		parts = append(parts, fmt.Sprintf("%d %s", counts[phase], name))
	}
	return fmt.Sprintf("%s of %d proxies", strings.Join(parts, ", "), w.want)
}

func (w *readyWatcher) stop() {
	close(w.stopCh)
	w.factory.Shutdown()
}

// acquireLeases takes n leases in namespace ns through the lease API, from
// createWorkers clients at once.
func acquireLeases(ctx context.Context, leaseAddr, ns string, n int, ttl, timeout time.Duration) error {
	c, err := leaseclient.New("http://"+leaseAddr, leaseclient.WithHTTPClient(&http.Client{Timeout: time.Minute}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for i := range n {
		g.Go(func() error {
			_, err := c.Acquire(gctx, leaseclient.AcquireRequest{Holder: fmt.Sprintf("bench-%d", i), Namespace: ns, TTL: ttl, Wait: 10 * time.Second})
			return err
		})
	}
	return g.Wait()
}
