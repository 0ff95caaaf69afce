package inspectionca

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// The bundles' cache keeps a ConfigMap's name, its CA label and the digest
// of its content, which equals the bundle's digest only when the
// ConfigMap holds exactly that bundle: publish rewrites anything else.
func TestCachedBundle(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	ours := map[string]string{inspection.CALabel: "true"}
	tests := map[string]struct {
		cm        *corev1.ConfigMap
		matches   bool
		wantLabel map[string]string
	}{
		"the bundle as published": {
			cm:      &corev1.ConfigMap{Data: map[string]string{inspection.BundleKey: pem}},
			matches: true,
		},
		"another certificate": {cm: &corev1.ConfigMap{Data: map[string]string{inspection.BundleKey: pem + pem}}},
		"a key more":          {cm: &corev1.ConfigMap{Data: map[string]string{inspection.BundleKey: pem, "x": ""}}},
		"binary data too": {
			cm: &corev1.ConfigMap{Data: map[string]string{inspection.BundleKey: pem}, BinaryData: map[string][]byte{"b": nil}},
		},
		"a tenant's 900 KB under the name": {
			cm: &corev1.ConfigMap{Data: map[string]string{inspection.BundleKey: strings.Repeat("x", 900<<10)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.cm.ObjectMeta = metav1.ObjectMeta{Namespace: "crawl", Name: inspection.BundleConfigMap, ResourceVersion: "7",
				Labels:      map[string]string{inspection.CALabel: "true", "team": strings.Repeat("t", 63)},
				Annotations: map[string]string{"pad": strings.Repeat("p", 200<<10)}}
			obj, err := cachedBundle(tc.cm)
			if err != nil {
				t.Fatal(err)
			}
			kept := obj.(*corev1.ConfigMap)
			if kept.Data != nil || kept.BinaryData != nil || len(kept.Annotations) != 1 || kept.ResourceVersion != "7" {
				t.Errorf("the cache keeps more than the digest: %+v", kept)
			}
			if diff := cmp.Diff(ours, kept.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if got := bundleDigest(kept) == digestOf([]byte(pem)); got != tc.matches {
				t.Errorf("matches the bundle: %v, want %v", got, tc.matches)
			}
			if bundleDigest(kept) != bundleDigest(tc.cm) {
				t.Error("the cached digest differs from the whole object's")
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "crawl/x", Obj: &corev1.ConfigMap{}}
	if got, _ := cachedBundle(tomb); got != any(tomb) {
		t.Error("a tombstone was changed")
	}
}
