package cloudkit

import (
	"testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// The keys are those the providers computed before the kit had them
// (SHA-256 of the scope, port and sorted ranges, NUL-separated), so every
// firewall and AWS security group already made keeps its name.
func TestAllowFromKey(t *testing.T) {
	ranges := []crawlv1alpha1.CIDR{"203.0.113.0/24", "10.0.0.0/8"}
	for name, tc := range map[string]struct {
		got, want string
	}{
		"cluster and VPC (aws)":            {AllowFromKey(3128, ranges, "c1", "vpc-1"), "fb0678792f636dc2"},
		"cluster only (hetzner, do)":       {AllowFromKey(3128, ranges, "c1"), "463b068aa863a97d"},
		"the order of ranges is not a key": {AllowFromKey(3128, []crawlv1alpha1.CIDR{"10.0.0.0/8", "203.0.113.0/24"}, "c1"), "463b068aa863a97d"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", name, tc.got, tc.want)
		}
	}
	if AllowFromKey(3129, ranges, "c1") == AllowFromKey(3128, ranges, "c1") {
		t.Error("another port, the same key")
	}
}
