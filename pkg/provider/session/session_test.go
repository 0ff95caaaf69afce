package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func member(uid string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Namespace: "ns", UID: k8stypes.UID("uid-" + uid)},
		Spec: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderSession,
			Session: &crawlv1alpha1.SessionProvider{Instance: "pool-i1",
				Endpoint:             crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 41000},
				CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "proxy-auth-i1"}}},
	}
}

// TestLifecycle: the session's instance is the shared instance's address;
// a delete makes Get say it is gone; a new UID is a new session.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	p := New()
	a, err := p.Create(ctx, provider.CreateRequest{Proxy: member("a"), SpecHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Instance{ID: "127.0.0.1:41000/" + upstream.SessionID("uid-a"), State: provider.StateRunning, IP: "127.0.0.1", Port: 41000,
		SpecHash: "h", Message: "session " + upstream.SessionID("uid-a") + " of the instance at 127.0.0.1:41000"}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	b, _ := p.Create(ctx, provider.CreateRequest{Proxy: member("b")})
	if b.ID == a.ID {
		t.Errorf("two members share session %s", a.ID)
	}
	if err := p.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, a.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := p.Get(ctx, b.ID); err != nil {
		t.Errorf("Get of the other session: %v", err)
	}
}

// TestCredentialsDeriveFromTheInstance: every reader reads a session's
// credentials from the instance's Secret (no Secret of its own): the
// instance's username plus the session, the instance's password and lease
// keys, only from a Secret marked for proxies.
func TestCredentialsDeriveFromTheInstance(t *testing.T) {
	marked := map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}
	tests := map[string]struct {
		secret  *corev1.Secret
		want    *proxyaccess.Credentials
		wantErr string
	}{
		"instance credentials": {
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "proxy-auth-i1", Labels: marked},
				Data: map[string][]byte{"username": []byte("px"), "password": []byte("pw"), "lease-key": []byte("k")}},
			want: &proxyaccess.Credentials{Username: "px+session-" + upstream.SessionID("uid-a"), Password: "pw", LeaseKeys: "k"},
		},
		"not marked": {
			secret:  &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "proxy-auth-i1"}, Data: map[string][]byte{"username": []byte("px"), "password": []byte("pw")}},
			wantErr: `spec.session.credentialsSecretRef: Secret "proxy-auth-i1" is not marked for proxy use`,
		},
		"no username": {
			secret:  &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "proxy-auth-i1", Labels: marked}, Data: map[string][]byte{"password": []byte("pw")}},
			wantErr: `spec.session.credentialsSecretRef: Secret "proxy-auth-i1" key "username" is missing or empty`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := proxyaccess.CredentialsSecret(member("a")); got != "proxy-auth-i1" {
				t.Errorf("CredentialsSecret = %q, want the instance's", got)
			}
			if proxyaccess.UsesGeneratedCredentials(member("a")) {
				t.Errorf("a session has a generated Secret")
			}
			got, err := proxyaccess.ReadProxyCredentials(member("a"), func(name string) (*corev1.Secret, error) {
				if name != "proxy-auth-i1" {
					t.Errorf("read Secret %q, want the instance's", name)
				}
				return tc.secret, nil
			})
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSessionSpec: a pool member on an instance names it, its address and
// its credentials Secret, and keeps the template's probe and lease limit.
func TestSessionSpec(t *testing.T) {
	instance := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "pool-i1", UID: "i1"},
		Status: crawlv1alpha1.ProxyStatus{IP: "127.0.0.1", Port: 41000}}
	template := &crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, MaxLeases: 1,
		HealthCheck: crawlv1alpha1.HealthCheck{URL: "http://t/ip", ExitIPFromBody: true}}
	got := New().SessionSpec(instance, template)
	want := crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderSession, MaxLeases: 1,
		HealthCheck: template.HealthCheck,
		Session: &crawlv1alpha1.SessionProvider{Instance: "pool-i1", Endpoint: crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 41000, Scheme: crawlv1alpha1.SchemeHTTP},
			CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: proxyaccess.GeneratedCredentialsSecret(instance)}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SessionSpec (-want +got):\n%s", diff)
	}
	if name := New().SessionInstance(member("a")); name != "pool-i1" {
		t.Errorf("SessionInstance = %q", name)
	}
}
