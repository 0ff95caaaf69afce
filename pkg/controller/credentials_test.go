package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// The generated Secret is controlled by its Proxy (the garbage collector
// deletes it with the Proxy), labelled (marked for proxies among them: the
// readers take nothing from an unmarked Secret), and holds random
// credentials that basic auth and ReadCredentials accept; two Secrets never
// share them.
func TestGeneratedCredentialsSecret(t *testing.T) {
	p := newProxy()
	first, err := generatedCredentialsSecret(p)
	if err != nil {
		t.Fatal(err)
	}
	second, err := generatedCredentialsSecret(p)
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := metav1.ObjectMeta{
		Namespace: testNamespace,
		Name:      "proxy-auth-" + testUID,
		Labels:    map[string]string{GeneratedCredentialsLabel: "p1", crawlv1alpha1.ProxyCredentialsLabel: "true"},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "crawl.proxyfleet.io/v1alpha1", Kind: "Proxy", Name: "p1", UID: testUID,
			Controller: ptr.To(true),
		}},
	}
	if diff := cmp.Diff(wantMeta, first.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	creds, err := proxyaccess.ReadCredentials(first.Name, func(string) (*corev1.Secret, error) { return first, nil })
	if err != nil {
		t.Fatalf("ReadCredentials refuses the generated Secret: %v", err)
	}
	if len(creds.Password) < 32 || strings.ContainsAny(creds.Username+creds.Password, ":\x00") {
		t.Errorf("generated credentials of %d and %d characters, or with ':' or NUL", len(creds.Username), len(creds.Password))
	}
	again, _ := proxyaccess.ReadCredentials(second.Name, func(string) (*corev1.Secret, error) { return second, nil })
	if again.Username == creds.Username || again.Password == creds.Password {
		t.Error("two generated Secrets share a username or password")
	}
	// And a lease key of the instance's own, which signs its leases.
	if _, err := leasecred.ParseKeys(creds.LeaseKeys); err != nil {
		t.Errorf("the generated lease key: %v", err)
	}
	if again.LeaseKeys == creds.LeaseKeys {
		t.Error("two generated Secrets share a lease key")
	}
}

// TestLeaseBoundCondition: the latest successful probe says whether the
// instance checks lease credentials; a failed probe leaves it; a new
// instance starts without it.
func TestLeaseBoundCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		check      health.LeaseCheck
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		"checked":     {check: health.LeaseChecked, wantStatus: metav1.ConditionTrue, wantReason: ReasonInstanceChecksLeases},
		"no key":      {check: health.LeaseNoKey, wantStatus: metav1.ConditionFalse, wantReason: ReasonNoLeaseKey},
		"not checked": {check: health.LeaseNotChecked, wantStatus: metav1.ConditionFalse, wantReason: ReasonInstanceDoesNotCheck},
	} {
		t.Run(name, func(t *testing.T) {
			c := &Controller{clock: testingclock.NewFakeClock(time.Now())}
			p := newProxy()
			c.stageLeaseBound(p, tc.check)
			got := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound)
			if got == nil || got.Status != tc.wantStatus || got.Reason != tc.wantReason {
				t.Fatalf("LeaseBound = %+v, want %s/%s", got, tc.wantStatus, tc.wantReason)
			}
			if tc.check != health.LeaseChecked && !strings.Contains(got.Message, "advisory") {
				t.Errorf("message %q does not say leases are advisory", got.Message)
			}
			c.stageLeaseBound(p, health.LeaseUnknown)
			if again := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound); again.Reason != tc.wantReason {
				t.Errorf("an unknown check changed the condition to %+v", again)
			}
			clearHealth(p)
			if meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound) != nil {
				t.Error("clearHealth kept LeaseBound")
			}
		})
	}
}

// The Secret index follows proxyaccess.CredentialsSecret, so a change to a
// generated Secret requeues its Proxy.
func TestIndexBySecret(t *testing.T) {
	providers := provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
	tests := map[string]struct {
		p    *crawlv1alpha1.Proxy
		want []string
	}{
		"managed without spec.auth: the generated Secret":             {p: newProxy(), want: []string{testNamespace + "/proxy-auth-" + testUID}},
		"managed with spec.auth: the user's Secret":                   {p: newProxy(withAuth), want: []string{testNamespace + "/creds"}},
		"cloud-init and generated credentials":                        {p: newProxy(withCloudInitSecret("user-data")), want: []string{testNamespace + "/user-data", testNamespace + "/proxy-auth-" + testUID}},
		"external without spec.auth: none":                            {p: newProxy(withExternal)},
		"rendered credentials: the generated Secret and their source": {p: newSession(), want: []string{testNamespace + "/proxy-auth-" + testUID, testNamespace + "/vendor"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := indexBySecret(providers)(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("index keys (-want +got):\n%s", diff)
			}
		})
	}
}

// newSession is a Proxy whose provider renders its credentials: a session
// of a proxy network, with the account's password in Secret "vendor".
func newSession() *crawlv1alpha1.Proxy {
	return newProxy(withFinalizer, withProvider(crawlv1alpha1.ProviderUpstream), func(p *crawlv1alpha1.Proxy) {
		p.Spec.Upstream = &crawlv1alpha1.UpstreamProvider{
			Endpoint:             crawlv1alpha1.Endpoint{Host: "127.0.0.8", Port: 8000},
			UsernameTemplate:     "user-acme-session-{session}",
			CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"},
		}
	})
}

// vendorSecret is the account's Secret of newSession.
func vendorSecret(password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "vendor", Labels: markedForProxies},
		Data:       map[string][]byte{"password": []byte(password)},
	}
}

// renderedCopy is newSession's generated Secret holding password.
func renderedCopy(password string) *corev1.Secret {
	s := generatedSecret()
	s.Data = map[string][]byte{
		"username": []byte("user-acme-session-" + upstream.SessionID(testUID)),
		"password": []byte(password),
	}
	return s
}

// A provider that renders credentials (provider.CredentialsRenderer) has
// them kept in the generated Secret: written on the first sync, rewritten
// when their source changes, and deleted when the source loses its mark.
// The instance is not configured with them
// (provider.CredentialsCheckedElsewhere): they never enter the spec hash,
// so a rotation replaces nothing.
func TestRenderedCredentials(t *testing.T) {
	tests := map[string]struct {
		secrets       []*corev1.Secret
		wantErr       bool
		wantSecrets   []string                 // Secret writes, in order
		wantGenerated *proxyaccess.Credentials // nil: no generated Secret after the sync
	}{
		"first sync: the generated Secret holds the rendered credentials": {
			secrets:       []*corev1.Secret{vendorSecret("pw-1")},
			wantSecrets:   []string{"create secrets"},
			wantGenerated: &proxyaccess.Credentials{Username: "user-acme-session-" + upstream.SessionID(testUID), Password: "pw-1"},
		},
		"the account's password rotated: the copy is rewritten": {
			secrets:       []*corev1.Secret{vendorSecret("pw-2"), renderedCopy("pw-1")},
			wantSecrets:   []string{"update secrets"},
			wantGenerated: &proxyaccess.Credentials{Username: "user-acme-session-" + upstream.SessionID(testUID), Password: "pw-2"},
		},
		"in step: no write": {
			secrets:       []*corev1.Secret{vendorSecret("pw-1"), renderedCopy("pw-1")},
			wantGenerated: &proxyaccess.Credentials{Username: "user-acme-session-" + upstream.SessionID(testUID), Password: "pw-1"},
		},
		"the account's Secret lost its mark: the copy is deleted": {
			secrets:     []*corev1.Secret{unmarked(vendorSecret("pw-1")), renderedCopy("pw-1")},
			wantErr:     true,
			wantSecrets: []string{"delete secrets"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newSession(), tc.secrets, nil)
			f.controller.providers[crawlv1alpha1.ProviderUpstream] = upstream.New()

			_, err := f.controller.sync(context.Background(), testKey)
			if (err != nil) != tc.wantErr {
				t.Errorf("err = %v, want error: %v", err, tc.wantErr)
			}
			var secretWrites []string
			for _, w := range f.writes() {
				if strings.HasSuffix(w, " secrets") {
					secretWrites = append(secretWrites, w)
				}
			}
			if diff := cmp.Diff(tc.wantSecrets, secretWrites); diff != "" {
				t.Errorf("Secret writes (-want +got):\n%s", diff)
			}
			var got *proxyaccess.Credentials
			stored, err := f.kube.CoreV1().Secrets(testNamespace).Get(context.Background(), proxyaccess.GeneratedCredentialsSecret(newSession()), metav1.GetOptions{})
			if err == nil {
				got = &proxyaccess.Credentials{Username: string(stored.Data["username"]), Password: string(stored.Data["password"])}
			}
			if diff := cmp.Diff(tc.wantGenerated, got); diff != "" {
				t.Errorf("generated Secret (-want +got):\n%s", diff)
			}
			if digest, err := f.controller.credentialsDigest(newSession()); digest != "" || err != nil {
				t.Errorf("credentialsDigest = %q, %v; want none: the session is not configured with its credentials", digest, err)
			}
		})
	}
}
