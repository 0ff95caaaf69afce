package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
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
}

// The Secret index follows proxyaccess.CredentialsSecret, so a change to a
// generated Secret requeues its Proxy.
func TestIndexBySecret(t *testing.T) {
	tests := map[string]struct {
		p    *crawlv1alpha1.Proxy
		want []string
	}{
		"managed without spec.auth: the generated Secret": {p: newProxy(), want: []string{testNamespace + "/proxy-auth-" + testUID}},
		"managed with spec.auth: the user's Secret":       {p: newProxy(withAuth), want: []string{testNamespace + "/creds"}},
		"cloud-init and generated credentials":            {p: newProxy(withCloudInitSecret("user-data")), want: []string{testNamespace + "/user-data", testNamespace + "/proxy-auth-" + testUID}},
		"external without spec.auth: none":                {p: newProxy(withExternal)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := indexBySecret(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("index keys (-want +got):\n%s", diff)
			}
		})
	}
}
