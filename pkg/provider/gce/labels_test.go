package gce

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func TestLabelKey(t *testing.T) {
	tests := map[string]struct {
		tag, want string
		// reversible: tagKey(want) gives the tag back.
		reversible bool
	}{
		"managed-by":      {tag: crawlv1alpha1.TagManagedBy, want: "crawl-proxyfleet-io_managed-by", reversible: true},
		"proxy-uid":       {tag: crawlv1alpha1.TagProxyUID, want: "crawl-proxyfleet-io_proxy-uid", reversible: true},
		"proxy-namespace": {tag: crawlv1alpha1.TagProxyNamespace, want: "crawl-proxyfleet-io_proxy-namespace", reversible: true},
		"proxy-name":      {tag: crawlv1alpha1.TagProxyName, want: "crawl-proxyfleet-io_proxy-name", reversible: true},
		"no prefix":       {tag: "team", want: "team", reversible: true},
		"upper case":      {tag: "Example.COM/Team", want: "example-com_team"},
		"odd characters":  {tag: "a.b/c d+e", want: "a-b_c-d-e", reversible: false},
		"leading digit":   {tag: "1password.com/x", want: "k1password-com_x"},
		"too long": {
			tag:  "very.long.prefix.example.com/" + strings.Repeat("n", 60),
			want: "very-long-prefix-example-com_" + strings.Repeat("n", 23) + "-" + hashOf("very.long.prefix.example.com/"+strings.Repeat("n", 60)),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := labelKey(tc.tag)
			if got != tc.want {
				t.Errorf("labelKey(%q) = %q, want %q", tc.tag, got, tc.want)
			}
			if !validLabelKey(got) {
				t.Errorf("labelKey(%q) = %q is not a valid GCE label key", tc.tag, got)
			}
			if back := tagKey(got); tc.reversible && back != tc.tag {
				t.Errorf("tagKey(%q) = %q, want %q", got, back, tc.tag)
			}
		})
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 200) + ".example"
	tests := map[string]struct {
		tag, want  string
		reversible bool
	}{
		"managed-by value": {tag: crawlv1alpha1.ManagedByValue, want: "proxy-operator", reversible: true},
		"uid":              {tag: "0f8fe8c2-4c1e-4d2a-9b1e-6a1f2e3d4c5b", want: "0f8fe8c2-4c1e-4d2a-9b1e-6a1f2e3d4c5b", reversible: true},
		"namespace":        {tag: "crawlers", want: "crawlers", reversible: true},
		"dotted name":      {tag: "eu.proxy.01", want: "eu_proxy_01", reversible: true},
		"empty":            {tag: "", want: "", reversible: true},
		"upper case":       {tag: "Mixed", want: "mixed"},
		"too long":         {tag: long, want: strings.Repeat("a", 52) + "-" + hashOf(long)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := labelValue(tc.tag)
			if got != tc.want {
				t.Errorf("labelValue(%q) = %q, want %q", tc.tag, got, tc.want)
			}
			if len(got) > maxLabelLength || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
				t.Errorf("labelValue(%q) = %q is not a valid GCE label value", tc.tag, got)
			}
			if back := tagValue(got); tc.reversible && back != tc.tag {
				t.Errorf("tagValue(%q) = %q, want %q", got, back, tc.tag)
			}
		})
	}
}

func TestLongValuesSharingAPrefixStayDistinct(t *testing.T) {
	prefix := strings.Repeat("p", 70)
	if a, b := labelValue(prefix+"-a"), labelValue(prefix+"-b"); a == b {
		t.Errorf("two long values map to the same label %q", a)
	}
}

func TestTagsRoundTripThroughLabels(t *testing.T) {
	tags := map[string]string{
		crawlv1alpha1.TagManagedBy:      crawlv1alpha1.ManagedByValue,
		crawlv1alpha1.TagProxyUID:       "0f8fe8c2-4c1e-4d2a-9b1e-6a1f2e3d4c5b",
		crawlv1alpha1.TagProxyNamespace: "crawlers",
		crawlv1alpha1.TagProxyName:      "eu.proxy.01",
	}
	if diff := cmp.Diff(tags, tagsFromLabels(labelsFromTags(tags))); diff != "" {
		t.Errorf("tags → labels → tags (-want +got):\n%s", diff)
	}
}

func validLabelKey(k string) bool {
	return len(k) > 0 && len(k) <= maxLabelLength && k[0] >= 'a' && k[0] <= 'z' &&
		strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789_-") == ""
}

// hashOf is the 10 hex digits a shortened label ends with.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}
