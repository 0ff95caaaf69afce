package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// TestTrimForCacheKeepsTheServersCopy, on the real API server: informers with
// the operator's transform cache Proxies without managedFields and Secrets
// without kubectl's last-applied copy, and the writes the controller makes
// from that cache (an update of the object, an update of its status) leave
// every manager's managedFields and the Proxy's annotations on the server.
func TestTrimForCacheKeepsTheServersCopy(t *testing.T) {
	cfg := shared.Get(t).Env.Config
	kube, crawl := kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
	ns := operatortest.NewNamespace(t, kube)
	ctx := t.Context()
	const applied = corev1.LastAppliedConfigAnnotation

	px := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "px", Namespace: ns, Annotations: map[string]string{applied: `{"kind":"Proxy"}`}},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:        crawlv1alpha1.ModeExternal,
			Endpoint:    &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 3128},
			HealthCheck: crawlv1alpha1.HealthCheck{URL: "http://127.0.0.1:9/generate_204", ExpectedStatus: 204},
		},
	}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, px, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: ns, Annotations: map[string]string{applied: `{"data":{"password":"c2VjcmV0"}}`, "team": "crawl"}},
		Data:       map[string][]byte{"username": []byte("u"), "password": []byte("secret")},
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
		t.Fatal(err)
	}

	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(crawl, 0, crawlinformers.WithNamespace(ns), crawlinformers.WithTransform(operator.TrimForCache))
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns), informers.WithTransform(operator.TrimForCache))
	proxies, secrets := crawlFactory.Crawl().V1alpha1().Proxies(), kubeFactory.Core().V1().Secrets()
	proxies.Informer()
	secrets.Informer()
	stop := make(chan struct{})
	defer func() { close(stop); crawlFactory.Shutdown(); kubeFactory.Shutdown() }()
	crawlFactory.Start(stop)
	kubeFactory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), proxies.Informer().HasSynced, secrets.Informer().HasSynced) {
		t.Fatal("caches did not sync")
	}

	cachedSecret, err := secrets.Lister().Secrets(ns).Get("auth")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "crawl"}, cachedSecret.Annotations); diff != "" {
		t.Errorf("cached Secret's annotations (-want +got):\n%s", diff)
	}
	if cachedSecret.ManagedFields != nil || string(cachedSecret.Data["password"]) != "secret" {
		t.Errorf("cached Secret: managedFields %v, password %q; want none and the data", cachedSecret.ManagedFields, cachedSecret.Data["password"])
	}

	// An update of the object, then of its status, each from the cache as
	// the controller makes them.
	fromCache := func(want func(*crawlv1alpha1.Proxy) bool) *crawlv1alpha1.Proxy {
		var got *crawlv1alpha1.Proxy
		eventually.Check(t, time.Minute, 20*time.Millisecond, "the Proxy in the cache", func(context.Context) error {
			p, err := proxies.Lister().Proxies(ns).Get("px")
			if err != nil {
				return err
			}
			if p.ManagedFields != nil {
				return fmt.Errorf("cached Proxy has managedFields %v", p.ManagedFields)
			}
			if !want(p) {
				return fmt.Errorf("cached Proxy at resourceVersion %s is not the update yet", p.ResourceVersion)
			}
			got = p.DeepCopy()
			return nil
		})
		return got
	}
	p := fromCache(func(*crawlv1alpha1.Proxy) bool { return true })
	p.Labels = map[string]string{"zone": "a"}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Update(ctx, p, metav1.UpdateOptions{FieldManager: "proxy-operator"}); err != nil {
		t.Fatal(err)
	}
	p = fromCache(func(p *crawlv1alpha1.Proxy) bool { return p.Labels["zone"] == "a" })
	p.Status.Phase = crawlv1alpha1.PhasePending
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: "proxy-operator"}); err != nil {
		t.Fatal(err)
	}

	server, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, "px", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type entry struct{ Manager, Operation, Subresource string }
	var got []entry
	for _, f := range server.ManagedFields {
		got = append(got, entry{f.Manager, string(f.Operation), f.Subresource})
	}
	want := []entry{{"kubectl-client-side-apply", "Update", ""}, {"proxy-operator", "Update", ""}, {"proxy-operator", "Update", "status"}}
	sortEntries := func(es []entry) {
		slices.SortFunc(es, func(a, b entry) int {
			return strings.Compare(a.Manager+a.Subresource, b.Manager+b.Subresource)
		})
	}
	sortEntries(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the server's managedFields after updates from the cache (-want +got):\n%s", diff)
	}
	if server.Annotations[applied] == "" || server.Status.Phase != crawlv1alpha1.PhasePending {
		t.Errorf("the server's Proxy: annotations %v, phase %q; want kubectl's annotation kept and phase Pending", server.Annotations, server.Status.Phase)
	}
}
