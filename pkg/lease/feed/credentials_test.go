package feed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func withAuth(secret string) crawlProxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

func leaseBound(p *crawlv1alpha1.Proxy) {
	p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: crawlv1alpha1.ConditionLeaseBound, Status: metav1.ConditionTrue, Reason: "InstanceChecksLeases"})
}

func sessionOn(secret string) crawlProxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Provider = crawlv1alpha1.ProviderSession
		p.Spec.Session = &crawlv1alpha1.SessionProvider{Instance: "i1", CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

// credentialsFixture is Proxies and Secrets in listers, and the signed
// leases a LeaseCredentials reported.
type credentialsFixture struct {
	creds  *LeaseCredentials
	keys   []leasecred.Key
	signed []push.Target
}

func newCredentialsFixture(t *testing.T, proxies ...*crawlv1alpha1.Proxy) *credentialsFixture {
	t.Helper()
	keyText, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := leasecred.ParseKeys(keyText)
	marked := map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Labels: marked}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	secrets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, obj := range []*corev1.Secret{
		secret("auth", map[string]string{"username": "u", "password": "hunter2"}),
		secret("keyed", map[string]string{"username": "k", "password": "hunter2", leasecred.SecretKey: keyText}),
		secret("partial", map[string]string{"username": "u"}),
		secret("proxy-auth-uid-generated", map[string]string{"username": "g", "password": "random", leasecred.SecretKey: keyText}),
		func() *corev1.Secret {
			s := secret("unmarked", map[string]string{"username": "u", "password": "hunter2"})
			s.Labels = nil
			return s
		}(),
	} {
		if err := secrets.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	proxyIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range proxies {
		if err := proxyIndex.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	f := &credentialsFixture{keys: keys}
	f.creds = NewLeaseCredentials(crawllisters.NewProxyLister(proxyIndex), corelisters.NewSecretLister(secrets), func(_ store.Lease, t push.Target) {
		f.signed = append(f.signed, t)
	})
	return f
}

func leaseOn(p *crawlv1alpha1.Proxy) store.Lease {
	return store.Lease{
		Ref:   store.LeaseRef{Epoch: 7, Serial: 1},
		Proxy: store.LeasedProxy{Key: store.ObjectName{Namespace: p.Namespace, Name: p.Name}, UID: p.UID},
		TTL:   time.Minute, GrantedAt: t0, ExpiresAt: t0.Add(time.Minute),
	}
}

func TestLeaseCredentials(t *testing.T) {
	sessionUser := "k+session-" + proxyaccess.SessionID("uid-member")
	for name, tc := range map[string]struct {
		proxy      *crawlv1alpha1.Proxy
		gateway    bool
		wantStatic *proxyaccess.Credentials
		// wantSigned: a lease credential for this username.
		wantSigned string
		wantErr    error
	}{
		"external without auth": {proxy: newCrawlProxy("open", func(p *crawlv1alpha1.Proxy) { p.Spec.Mode = crawlv1alpha1.ModeExternal })},
		// A Managed Proxy without spec.auth: the controller's generated Secret.
		"managed, lease-bound":          {proxy: newCrawlProxy("generated", leaseBound), wantSigned: "g"},
		"managed, not yet lease-bound":  {proxy: newCrawlProxy("generated"), wantStatic: &proxyaccess.Credentials{Username: "g", Password: "random"}},
		"auth without a key, advisory":  {proxy: newCrawlProxy("closed", withAuth("auth"), leaseBound), wantStatic: &proxyaccess.Credentials{Username: "u", Password: "hunter2"}},
		"a session, its exit signed":    {proxy: newCrawlProxy("member", sessionOn("keyed"), leaseBound), wantSigned: sessionUser},
		"gateway-only, to the gateway":  {proxy: newCrawlProxy("vendor", withAuth("auth"), gatewayOnly), gateway: true, wantStatic: &proxyaccess.Credentials{Username: "u", Password: "hunter2"}},
		"gateway-only, to a crawler":    {proxy: newCrawlProxy("vendor", withAuth("auth"), gatewayOnly), wantErr: auth.ErrGatewayOnly},
		"missing Secret":                {proxy: newCrawlProxy("missing", withAuth("nope")), wantErr: errNoCredentials},
		"incomplete Secret":             {proxy: newCrawlProxy("partial", withAuth("partial")), wantErr: errNoCredentials},
		"Secret not marked for proxies": {proxy: newCrawlProxy("unmarked", withAuth("unmarked")), wantErr: errNoCredentials},
	} {
		t.Run(name, func(t *testing.T) {
			f := newCredentialsFixture(t, tc.proxy)
			ctx := context.Background()
			if tc.gateway {
				ctx = auth.WithActingFor(ctx)
			}
			l := leaseOn(tc.proxy)
			got, err := f.creds.For(ctx, l)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
			if tc.wantSigned == "" {
				if diff := cmp.Diff(tc.wantStatic, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				if len(f.signed) != 0 {
					t.Errorf("told the pusher of %v for unsigned credentials", f.signed)
				}
				return
			}
			if got == nil || got.Username != tc.wantSigned || !got.LeaseBound || got.LeaseKeys != "" {
				t.Fatalf("credentials %+v, want signed for %q without the keys", got, tc.wantSigned)
			}
			claims, err := leasecred.Verify(f.keys, got.Username, got.Password)
			if err != nil || claims.Ref != push.Ref(l.Ref) || !claims.End.Equal(l.ExpiresAt) {
				t.Errorf("the password verifies as %+v, %v; want lease %v until %v", claims, err, l.Ref, l.ExpiresAt)
			}
			if len(f.signed) != 1 || f.signed[0].Addr != "127.0.0.5:3128" {
				t.Errorf("told the pusher %+v, want the instance's address", f.signed)
			}
			target, ok := f.creds.Target(l.Proxy.Key, l.Proxy.UID)
			if !ok || target.Addr != "127.0.0.5:3128" || target.Keys[0].ID() != f.keys[0].ID() {
				t.Errorf("Target = %+v, %v", target, ok)
			}
		})
	}
}

func gatewayOnly(p *crawlv1alpha1.Proxy) { p.Labels[crawlv1alpha1.GatewayOnlyLabel] = "true" }

func TestNoTargetForAnAdvisoryOrGoneProxy(t *testing.T) {
	f := newCredentialsFixture(t, newCrawlProxy("generated"), newCrawlProxy("closed", withAuth("auth"), leaseBound))
	for _, name := range []string{"generated", "closed", "gone"} {
		if _, ok := f.creds.Target(store.ObjectName{Namespace: testNamespace, Name: name}, ""); ok {
			t.Errorf("Target(%s) found one", name)
		}
	}
}
