package controllertest

// Helpers the cloud providers' suites share: the orphan collector run as on
// the leader, a Secret written in place, and the operator dying between a
// create and its status write.

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// NewCollector returns an orphan collector of prov, under name, with cfg's
// settings and a Proxy cache of the harness's namespace, synced; the cache
// stops with the test.
func (h *Harness) NewCollector(cfg gc.Config, name crawlv1alpha1.ProviderName, prov provider.Provider) *gc.Collector {
	t := h.T
	t.Helper()
	factory := crawlinformers.NewSharedInformerFactoryWithOptions(h.Crawl, 0, crawlinformers.WithNamespace(h.NS))
	proxies := factory.Crawl().V1alpha1().Proxies()
	informer := proxies.Informer() // registered before Start, or Start starts nothing
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("cache did not sync")
	}
	cfg.Providers = map[crawlv1alpha1.ProviderName]provider.Provider{name: prov}
	cfg.Proxies, cfg.ProxiesSynced, cfg.Live = proxies.Lister(), informer.HasSynced, h.Crawl
	collector, err := gc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return collector
}

// SetSecret creates the Secret name in the harness's namespace with data,
// or replaces the data of the one there.
func (h *Harness) SetSecret(name string, data map[string]string) {
	h.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	_, err := h.Kube.CoreV1().Secrets(h.NS).Create(h.Ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = h.Kube.CoreV1().Secrets(h.NS).Update(h.Ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		h.T.Fatal(err)
	}
}

// ProvisionThroughCrash stops h's controller, then creates p under an
// operator that dies between prov's create and the status write (its
// Create makes the instance, then never returns until the operator is
// stopped), and fails the test if that status was written anyway. It then
// starts a second operator with prov against the API server at cfg and
// returns p once provisioned: what that operator made of the instance the
// first one left behind is the caller's to check.
func (h *Harness) ProvisionThroughCrash(cfg *rest.Config, name crawlv1alpha1.ProviderName, prov provider.Provider, p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	t := h.T
	t.Helper()
	crashing := &crashAfterCreate{Provider: prov, created: make(chan struct{})}
	h.Stop()
	first := Start(t, cfg, Options{Namespace: h.NS, Providers: map[crawlv1alpha1.ProviderName]provider.Provider{name: crashing}})
	first.Create(p)
	select {
	case <-crashing.created:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first operator never created the instance of %s", p.Name)
	}
	first.Stop()
	got, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.ProviderID != "" {
		t.Fatalf("status.providerID %q written: the crash came too late", got.Status.ProviderID)
	}
	second := Start(t, cfg, Options{Namespace: h.NS, Providers: map[crawlv1alpha1.ProviderName]provider.Provider{name: prov}})
	return second.WaitProvisioned(p.Name)
}

// crashAfterCreate is the operator dying between the cloud's create and
// the status write: its Create makes the instance, then never returns to
// the controller until the controller is stopped.
type crashAfterCreate struct {
	provider.Provider
	once    sync.Once
	created chan struct{}
}

func (c *crashAfterCreate) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if _, err := c.Provider.Create(ctx, req); err != nil {
		return provider.Instance{}, err
	}
	c.once.Do(func() { close(c.created) })
	<-ctx.Done()
	return provider.Instance{}, ctx.Err()
}
