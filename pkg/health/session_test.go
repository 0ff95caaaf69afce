package health

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
)

// asSession makes the proxy a session of a proxy network (spec.provider
// upstream), whose network checks the credentials of its generated Secret.
func asSession() proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Mode, p.Spec.Endpoint, p.Spec.Provider = crawlv1alpha1.ModeManaged, nil, crawlv1alpha1.ProviderUpstream
		p.Spec.Upstream = &crawlv1alpha1.UpstreamProvider{CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"}}
	}
}

// A refusal of the credentials says where to look when the proxy's provider
// has something to say (a session: the username template and the account's
// Secret), and nothing more for an instance the operator configured.
func TestRefusalSaysWhereToLook(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "any", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret-Pa55")},
	}
	const refused = "proxy answered 407 Proxy Authentication Required"
	tests := map[string]struct {
		opts []proxyOption
		want string
	}{
		"a session": {
			opts: []proxyOption{asSession()},
			want: refused + `: the proxy network refused the username or the password; check spec.upstream.usernameTemplate and the password in spec.upstream.credentialsSecretRef (copied into Secret "proxy-auth-p-uid-1")`,
		},
		"a Managed instance": {opts: []proxyOption{managed()}, want: refused},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p", append(tc.opts, withThresholds(1, 1))...))
			f.engine.secrets = func(context.Context, string, string) (*corev1.Secret, error) { return secret, nil }
			f.engine.providers = provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
			f.engine.probe = func(context.Context, Target) Result {
				return Result{Class: ResultProxyRefused, Message: refused, Latency: time.Millisecond}
			}
			f.tick()
			if class := f.checkDue(testInterval); class != ResultProxyRefused {
				t.Fatalf("probe class %q, want %q", class, ResultProxyRefused)
			}
			v, ok := f.verdict("p")
			if !ok || v.Healthy {
				t.Fatalf("verdict %+v (ok=%v), want unhealthy", v, ok)
			}
			if diff := cmp.Diff(tc.want, v.Message); diff != "" {
				t.Errorf("verdict message (-want +got):\n%s", diff)
			}
		})
	}
}
