package feed

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

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
			got, err := creds(context.Background(), store.LeasedProxy{Key: info.Key, CredentialsSecret: info.CredentialsSecret})
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
