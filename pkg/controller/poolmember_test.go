package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// A Secret rotation changes a standalone Proxy's hash (it is replaced at
// once) but not a pool member's (the pool decides); an inline cloud-init
// edit changes both.
func TestInstanceHashPinsSecretsOfPoolMembers(t *testing.T) {
	secretSpec := crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal,
		CloudInit: &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "ci"}},
		Auth:      &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}}
	inlineSpec := crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, CloudInit: &crawlv1alpha1.CloudInit{Inline: ptr.To("v1")}}
	poolRef := metav1.OwnerReference{APIVersion: "crawl.proxyfleet.io/v1alpha1", Kind: "ProxyPool", Name: "eu", UID: "u", Controller: ptr.To(true)}
	otherGroup := poolRef
	otherGroup.APIVersion = "example.com/v1"
	proxy := func(spec crawlv1alpha1.ProxySpec, refs ...metav1.OwnerReference) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{OwnerReferences: refs}, Spec: spec}
	}
	tests := map[string]struct {
		p             *crawlv1alpha1.Proxy
		before, after []byte // resolved cloud-init content
		credsBefore   string
		credsAfter    string
		wantChanged   bool
	}{
		"standalone, Secret rotated":             {p: proxy(secretSpec), before: []byte("v1"), after: []byte("v2"), wantChanged: true},
		"standalone, credentials rotated":        {p: proxy(secretSpec), before: []byte("v1"), after: []byte("v1"), credsBefore: "a", credsAfter: "b", wantChanged: true},
		"member, Secret rotated":                 {p: proxy(secretSpec, poolRef), before: []byte("v1"), after: []byte("v2")},
		"member, credentials rotated":            {p: proxy(secretSpec, poolRef), before: []byte("v1"), after: []byte("v1"), credsBefore: "a", credsAfter: "b"},
		"member, inline cloud-init edited":       {p: proxy(inlineSpec, poolRef), before: []byte("v1"), after: []byte("v2"), wantChanged: true},
		"ProxyPool of another group: standalone": {p: proxy(secretSpec, otherGroup), before: []byte("v1"), after: []byte("v2"), wantChanged: true},
		// Generated credentials are the member's own: an instance without
		// them (from before they existed) or with a deleted Secret's must go.
		"member, generated credentials appear or change": {p: proxy(inlineSpec, poolRef), before: []byte("v1"), after: []byte("v1"), credsBefore: "", credsAfter: "b", wantChanged: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			changed := instanceHash(nil, tc.p, tc.before, tc.credsBefore) != instanceHash(nil, tc.p, tc.after, tc.credsAfter)
			if changed != tc.wantChanged {
				t.Errorf("hash changed: %v, want %v", changed, tc.wantChanged)
			}
		})
	}
}
