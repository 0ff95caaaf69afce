package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlfake "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

type crawlProxyOption func(*crawlv1alpha1.Proxy)

// newCrawlProxy is a Ready Managed Proxy at 127.0.0.5:3128.
func newCrawlProxy(name string, opts ...crawlProxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"tier": "a"}},
		Spec:       crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderLocal, MaxLeases: 2},
		Status:     crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, IP: "127.0.0.5", Port: 3128, LatencyMillis: 42},
	}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

func TestProxyInfoFrom(t *testing.T) {
	now := metav1.NewTime(t0)
	conditions := func(provisioned, healthy time.Time) crawlProxyOption {
		return func(p *crawlv1alpha1.Proxy) {
			p.Status.Conditions = []metav1.Condition{
				{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(provisioned)},
				{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(healthy)},
			}
		}
	}
	for name, tc := range map[string]struct {
		proxy          *crawlv1alpha1.Proxy
		wantReady      bool
		wantURL        string
		wantReadySince time.Time
		// The Secret a grant reads credentials from; a Managed Proxy
		// without spec.auth has the controller's.
		wantSecret string
	}{
		"Ready managed": {proxy: newCrawlProxy("p"), wantReady: true, wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p"},
		"Ready since the later transition": {
			proxy:     newCrawlProxy("p", conditions(t0, t0.Add(time.Minute))),
			wantReady: true, wantURL: "http://127.0.0.5:3128", wantReadySince: t0.Add(time.Minute), wantSecret: "proxy-auth-uid-p",
		},
		"not Ready: no Ready time": {
			proxy: newCrawlProxy("p", conditions(t0, t0.Add(time.Minute)), func(p *crawlv1alpha1.Proxy) {
				p.Status.Phase = crawlv1alpha1.PhaseUnhealthy
			}),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"spec.auth names the Secret": {
			proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) {
				p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "auth"}}
			}),
			wantReady: true, wantURL: "http://127.0.0.5:3128", wantSecret: "auth",
		},
		"Ready external over https": {
			proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) {
				p.Spec = crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.5", Port: 3128, Scheme: crawlv1alpha1.SchemeHTTPS}}
			}),
			wantReady: true, wantURL: "https://127.0.0.5:3128",
		},
		"IPv6": {
			proxy:     newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "::1" }),
			wantReady: true, wantURL: "http://[::1]:3128", wantSecret: "proxy-auth-uid-p",
		},
		"Unhealthy": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseUnhealthy }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"Provisioning": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseProvisioning }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"no address": {proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "" }), wantSecret: "proxy-auth-uid-p"},
		"no port":    {proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Port = 0 }), wantSecret: "proxy-auth-uid-p"},
		"being deleted": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.DeletionTimestamp = &now }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := ProxyInfoFrom(tc.proxy)
			want := ProxyInfo{
				Key: cache.NewObjectName(testNamespace, "p"), UID: tc.proxy.UID, Ready: tc.wantReady, URL: tc.wantURL,
				Labels: map[string]string{"tier": "a"}, LatencyMillis: 42, MaxLeases: tc.proxy.Spec.MaxLeases, ReadySince: tc.wantReadySince,
				CredentialsSecret: tc.wantSecret,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFeedKeepsTheStoreInStep(t *testing.T) {
	client := crawlfake.NewClientset(newCrawlProxy("p1"))
	factory := crawlinformers.NewSharedInformerFactory(client, 0)
	store, _, _ := newTestStore(t, nil)
	feed, err := NewFeed(store, factory.Crawl().V1alpha1().Proxies())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // before Shutdown, which waits for the informers to stop
	waitUntil(t, func() bool { return feed.HasSynced() })
	if got := store.Proxies("", nil); len(got) != 1 || got[0].Key.Name != "p1" {
		t.Fatalf("proxies after sync: %+v", got)
	}
	l := acquire(t, store, AcquireRequest{})

	// Unhealthy: the lease is revoked.
	p := newCrawlProxy("p1", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseUnhealthy })
	if _, err := client.CrawlV1alpha1().Proxies(testNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { _, err := store.Renew(l.ID, 0); return errors.Is(err, ErrRevoked) })

	// A new proxy is added; a deleted one goes.
	if _, err := client.CrawlV1alpha1().Proxies(testNamespace).Create(ctx, newCrawlProxy("p2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(store.Proxies("", nil)) == 1 && store.Proxies("", nil)[0].Key.Name == "p2" })
	if err := client.CrawlV1alpha1().Proxies(testNamespace).Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(store.Proxies("", nil)) == 0 })
}

// waitUntil waits up to 10s for cond to hold
// (pkg/testing/eventually).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	eventually.Check(t, 10*time.Second, 5*time.Millisecond, "condition", eventually.Holds(func() (bool, string) { return cond(), "condition not met" }))
}

func TestSecretCredentials(t *testing.T) {
	withAuth := func(secret string) crawlProxyOption {
		return func(p *crawlv1alpha1.Proxy) {
			p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
		}
	}
	marked := map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Labels: marked}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	secretIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	proxies := map[string]*crawlv1alpha1.Proxy{}
	for _, p := range []*crawlv1alpha1.Proxy{
		newCrawlProxy("open", func(p *crawlv1alpha1.Proxy) { p.Spec.Mode = crawlv1alpha1.ModeExternal }),
		newCrawlProxy("generated"),
		newCrawlProxy("closed", withAuth("auth")),
		newCrawlProxy("missing", withAuth("nope")),
		newCrawlProxy("partial", withAuth("partial")),
		newCrawlProxy("unmarked", withAuth("unmarked")),
	} {
		proxies[p.Name] = p
	}
	for _, obj := range []any{
		secret("auth", map[string]string{"username": "u", "password": "hunter2"}),
		secret("partial", map[string]string{"username": "u"}),
		secret("proxy-auth-uid-generated", map[string]string{"username": "g", "password": "random"}),
		func() *corev1.Secret {
			s := secret("unmarked", map[string]string{"username": "u", "password": "hunter2"})
			s.Labels = nil
			return s
		}(),
	} {
		if err := secretIndexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	creds := SecretCredentials(corelisters.NewSecretLister(secretIndexer))
	for name, tc := range map[string]struct {
		proxy   string
		want    *proxyaccess.Credentials
		wantErr bool
	}{
		"external without auth": {proxy: "open"},
		// A Managed Proxy without spec.auth: the controller's generated Secret.
		"managed without auth": {proxy: "generated", want: &proxyaccess.Credentials{Username: "g", Password: "random"}},
		"auth":                 {proxy: "closed", want: &proxyaccess.Credentials{Username: "u", Password: "hunter2"}},
		"missing Secret":       {proxy: "missing", wantErr: true},
		"incomplete Secret":    {proxy: "partial", wantErr: true},
		// docs/decisions/0230-credentials-secrets-opt-in-by-label.md: a grant never carries an unmarked Secret's password.
		"Secret not marked for proxies": {proxy: "unmarked", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			// The Secret's name travels from the Proxy through the store (ProxyInfoFrom).
			info := ProxyInfoFrom(proxies[tc.proxy])
			got, err := creds(context.Background(), LeasedProxy{Key: info.Key, CredentialsSecret: info.CredentialsSecret})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && (!errors.Is(err, errNoCredentials) || strings.Contains(err.Error(), "hunter2")) {
				t.Errorf("error %q: want errNoCredentials without the secret", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
