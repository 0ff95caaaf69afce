package health

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func TestCheckFor(t *testing.T) {
	// bare has an empty healthCheck, then opts applied.
	bare := func(opts ...proxyOption) *crawlv1alpha1.Proxy {
		p := testProxy("p")
		p.Spec.HealthCheck = crawlv1alpha1.HealthCheck{}
		for _, o := range opts {
			o(p)
		}
		return p
	}
	tests := map[string]struct {
		proxy *crawlv1alpha1.Proxy
		want  check
	}{
		"defaults for an object that skipped the CRD's defaulting": {
			proxy: bare(),
			want: check{
				target: Target{Proxy: &url.URL{Scheme: "http", Host: "127.0.0.1:3128"}, URL: DefaultURL,
					ExpectedStatus: 204, Timeout: 5 * time.Second},
				interval: 30 * time.Second, thresholds: thresholds{success: 1, failure: 3},
			},
		},
		"spec values": {
			proxy: testProxy("p", withThresholds(2, 5), withAuth("creds"), func(p *crawlv1alpha1.Proxy) {
				p.Spec.HealthCheck.ExpectedStatus = 200
				p.Spec.HealthCheck.TLS = &crawlv1alpha1.HealthCheckTLS{InsecureSkipVerify: true, ServerName: "example.com"}
			}),
			want: check{
				target: Target{Proxy: &url.URL{Scheme: "http", Host: "127.0.0.1:3128"}, URL: "http://127.0.0.1:1/generate_204",
					ExpectedStatus: 200, Timeout: time.Second, InsecureSkipVerify: true, ServerName: "example.com"},
				interval: testInterval, thresholds: thresholds{success: 2, failure: 5}, authSecret: "creds",
			},
		},
		"External with scheme https: TLS to the proxy": {
			proxy: bare(func(p *crawlv1alpha1.Proxy) { p.Spec.Endpoint.Scheme = crawlv1alpha1.SchemeHTTPS }),
			want: check{
				target: Target{Proxy: &url.URL{Scheme: "https", Host: "127.0.0.1:3128"}, URL: DefaultURL,
					ExpectedStatus: 204, Timeout: 5 * time.Second},
				interval: 30 * time.Second, thresholds: thresholds{success: 1, failure: 3},
			},
		},
		"Managed: plain http to the proxy, at the status address": {
			proxy: bare(withAddress("10.1.2.3", 3128), func(p *crawlv1alpha1.Proxy) {
				p.Spec.Mode, p.Spec.Endpoint, p.Spec.Provider = crawlv1alpha1.ModeManaged, nil, crawlv1alpha1.ProviderKubernetes
				p.Spec.HealthCheck.Interval = &metav1.Duration{Duration: time.Minute}
			}),
			want: check{
				target: Target{Proxy: &url.URL{Scheme: "http", Host: "10.1.2.3:3128"}, URL: DefaultURL,
					ExpectedStatus: 204, Timeout: 5 * time.Second},
				interval: time.Minute, thresholds: thresholds{success: 1, failure: 3},
				// No spec.auth: probed with the controller's generated Secret.
				authSecret: proxyaccess.GeneratedCredentialsSecret(testProxy("p")),
				// A Managed instance must refuse a request without them.
				mustRefuseAnonymous: true,
			},
		},
		"a session of a proxy network: not proved closed, a refusal explained": {
			proxy: bare(withAddress("10.1.2.3", 8000), func(p *crawlv1alpha1.Proxy) {
				p.Spec.Mode, p.Spec.Endpoint, p.Spec.Provider = crawlv1alpha1.ModeManaged, nil, crawlv1alpha1.ProviderUpstream
				p.Spec.Upstream = &crawlv1alpha1.UpstreamProvider{CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"}}
			}),
			want: check{
				target: Target{Proxy: &url.URL{Scheme: "http", Host: "10.1.2.3:8000"}, URL: DefaultURL,
					ExpectedStatus: 204, Timeout: 5 * time.Second},
				interval: 30 * time.Second, thresholds: thresholds{success: 1, failure: 3},
				authSecret: proxyaccess.GeneratedCredentialsSecret(testProxy("p")),
				// The network checks the credentials; its super proxy is
				// not the operator's to close.
				mustRefuseAnonymous: false,
				refusalHint:         `the proxy network refused the username or the password; check spec.upstream.usernameTemplate and the password in spec.upstream.credentialsSecretRef (copied into Secret "proxy-auth-p-uid-1")`,
			},
		},
	}
	providers := provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			address, ok := proxyAddress(tc.proxy)
			if !ok {
				t.Fatal("no address")
			}
			got := checkFor(tc.proxy, address, nil, providers)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(check{}, thresholds{})); diff != "" {
				t.Errorf("checkFor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProxyAddress(t *testing.T) {
	tests := map[string]struct {
		ip     string
		port   int32
		want   string
		wantOK bool
	}{
		"IPv4":    {ip: "127.0.0.1", port: 3128, want: "127.0.0.1:3128", wantOK: true},
		"IPv6":    {ip: "::1", port: 3128, want: "[::1]:3128", wantOK: true},
		"no IP":   {port: 3128},
		"no port": {ip: "127.0.0.1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := proxyAddress(testProxy("p", withAddress(tc.ip, tc.port)))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("proxyAddress = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
