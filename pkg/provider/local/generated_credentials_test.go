package local_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestManagedProxyWithoutAuthIsNeverOpen: the real controller on the real
// API server with the real local provider and forward-proxy. A Managed Proxy
// created without spec.auth gets a generated Secret controlled by it; its
// instance refuses an unauthenticated request with 407; the lease feed's
// credentials (feed.SecretCredentials, what the lease API hands out) are
// the generated ones, and a request with them goes through.
func TestManagedProxyWithoutAuthIsNeverOpen(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() { deleteAll(t, stateDir) })
	h := controllertest.Start(t, apiServer(t).Config, controllertest.Options{
		NamespacePrefix: "local-open-",
		Workers:         2,
		Registry:        provider.Registry{local.Registration()},
		ProvidersWithSecrets: func(secrets corelisters.SecretLister) map[crawlv1alpha1.ProviderName]provider.Provider {
			lp, err := local.New(local.Options{
				StateDir: stateDir,
				Binary:   proxytest.ForwardProxyBinary(t),
				Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
					return secrets.Secrets(namespace).Get(name)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			return map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: lp}
		},
	})
	created := h.Create(&crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "open"},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal},
	})

	var p *crawlv1alpha1.Proxy
	h.Eventually(30*time.Second, "Provisioned=True", func() (bool, string) {
		p = h.Get("open")
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	if p.Spec.Auth != nil {
		t.Errorf("the controller wrote spec.auth (%+v): GitOps would fight it", p.Spec.Auth)
	}

	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(h.Ctx, proxyaccess.GeneratedCredentialsSecret(created), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the generated credentials Secret: %v", err)
	}
	// The test API server has no garbage collector: the controller
	// ownerReference is what deletes the Secret with the Proxy in a cluster.
	if !metav1.IsControlledBy(secret, created) {
		t.Errorf("the generated Secret's ownerReferences %+v do not make the Proxy its controller", secret.OwnerReferences)
	}
	user, pass := string(secret.Data[crawlv1alpha1.AuthUsernameKey]), string(secret.Data[crawlv1alpha1.AuthPasswordKey])
	if user == "" || len(pass) < 32 {
		t.Fatalf("generated username of %d and password of %d characters", len(user), len(pass))
	}

	target := proxytest.StartHTTPTarget(t)
	addr := net.JoinHostPort(p.Status.IP, strconv.Itoa(int(p.Status.Port)))
	ctx, cancel := context.WithTimeout(h.Ctx, 20*time.Second)
	defer cancel()
	res, err := proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: addr}, target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusProxyAuthRequired {
		t.Errorf("without credentials through %s: status %d, err %v; want 407", addr, res.Status, err)
	}

	// What the lease API hands a lease holder, read as the operator wires it.
	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(h.Crawl, 0, crawlinformers.WithNamespace(h.NS))
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(h.Kube, 0, kubeinformers.WithNamespace(h.NS))
	proxies, secrets := crawlFactory.Crawl().V1alpha1().Proxies(), kubeFactory.Core().V1().Secrets()
	proxies.Informer()
	secrets.Informer()
	crawlFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	defer crawlFactory.Shutdown()
	defer kubeFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), proxies.Informer().HasSynced, secrets.Informer().HasSynced) {
		t.Fatal("informers did not sync")
	}
	open, err := proxies.Lister().Proxies(h.Key("open").Namespace).Get("open")
	if err != nil {
		t.Fatal(err)
	}
	info := feed.ProxyInfoFrom(open)
	leaseCreds := feed.NewLeaseCredentials(proxies.Lister(), secrets.Lister(), nil)
	lease := store.Lease{Ref: store.LeaseRef{Epoch: 1, Serial: 1}, Proxy: store.LeasedProxy{Key: info.Key, UID: info.UID}, ExpiresAt: time.Now().Add(time.Minute)}
	creds, err := leaseCreds.For(ctx, lease)
	if err != nil || creds == nil {
		t.Fatalf("the lease feed's credentials: %v, %v", creds, err)
	}
	if creds.Username != user || creds.Password != pass {
		t.Error("the lease feed's credentials are not the generated ones")
	}
	res, err = proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(creds.Username, creds.Password)}, target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusNoContent {
		t.Fatalf("with the lease's credentials through %s: status %d, err %v; want 204", addr, res.Status, err)
	}
	h.Health.Set(h.Key("open"), health.Verdict{Address: addr, Healthy: true, Message: "probe with the generated credentials succeeded", Latency: time.Millisecond, CheckedAt: time.Now(),
		Lease: health.LeaseChecked})
	h.WaitForPhase("open", crawlv1alpha1.PhaseReady)

	// The instance got the Secret's lease key: once LeaseBound, a lease's
	// credentials are signed, admit until the lease's end, and not after.
	h.Eventually(30*time.Second, "LeaseBound in the lister", func() (bool, string) {
		p, err := proxies.Lister().Proxies(h.NS).Get("open")
		return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound), fmt.Sprintf("%v", err)
	})
	for name, tc := range map[string]struct {
		end  time.Time
		want int
	}{
		"a live lease's":   {end: time.Now().Add(time.Minute), want: http.StatusNoContent},
		"an ended lease's": {end: time.Now().Add(-time.Second), want: http.StatusProxyAuthRequired},
	} {
		lease.ExpiresAt = tc.end
		signed, err := leaseCreds.For(ctx, lease)
		if err != nil || !signed.LeaseBound || signed.Password == pass {
			t.Fatalf("%s credentials: %+v, %v; want signed ones", name, signed, err)
		}
		res, err := proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(signed.Username, signed.Password)}, target.URL+"/generate_204", nil)
		if err != nil || res.Status != tc.want {
			t.Errorf("with %s credentials: status %d, err %v; want %d", name, res.Status, err, tc.want)
		}
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, "open", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "the Proxy is gone", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, "open", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}
