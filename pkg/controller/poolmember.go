package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// instanceHash is the spec hash an instance of p is recorded with. A
// standalone Proxy's includes the content of the Secrets it references, so
// rotating one replaces the instance at once. A ProxyPool member's leaves
// the Secret content out: the pool decides when a member is replaced (it
// makes a new member from the new content and drains the old one within
// its budget), so the Proxy controller must not replace every member at
// the same moment. Changes to the member's own spec still replace it, but
// the pool never edits a member's spec.
func instanceHash(registry provider.Registry, p *crawlv1alpha1.Proxy, cloudInit []byte, credentialsDigest string) string {
	if !isPoolMember(p) {
		return specHash(registry, p.Spec, cloudInit, credentialsDigest)
	}
	if p.Spec.CloudInit == nil || p.Spec.CloudInit.Inline == nil {
		cloudInit = nil // the Secret's content, pinned at creation
	}
	if !proxyaccess.UsesGeneratedCredentials(p) {
		credentialsDigest = "" // the user's Secret: the pool rolls it out
	}
	// Generated credentials are the member's own (never shared, never
	// rotated by the pool): an instance without them, from before they
	// existed, or after the Secret was deleted and generated anew, must go.
	return specHash(registry, p.Spec, cloudInit, credentialsDigest)
}

// isPoolMember says whether a ProxyPool of our group controls p (the kind
// alone is not enough: another group may have a ProxyPool too).
func isPoolMember(p *crawlv1alpha1.Proxy) bool {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "ProxyPool" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == crawlv1alpha1.SchemeGroupVersion.Group
}
