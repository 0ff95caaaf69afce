package controller

import (
	"testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// TestSpecHashEgress: spec.egress is passed to the instance as flags, so
// every change of it is a new instance; a spec without it keeps its hash.
func TestSpecHashEgress(t *testing.T) {
	base := crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderKubernetes}
	type cidrs = []crawlv1alpha1.CIDR
	with := func(allow, deny cidrs) crawlv1alpha1.ProxySpec {
		s := base
		s.Egress = &crawlv1alpha1.ProxyEgress{AllowCIDRs: allow, DenyCIDRs: deny}
		return s
	}
	hashes := map[string]string{}
	for name, spec := range map[string]crawlv1alpha1.ProxySpec{
		"none":           base,
		"allow":          with(cidrs{"10.0.0.0/8"}, nil),
		"other allow":    with(cidrs{"10.1.0.0/16"}, nil),
		"allow and deny": with(cidrs{"10.0.0.0/8"}, cidrs{"10.1.0.0/16"}),
		"two allows":     with(cidrs{"10.0.0.0/8", "192.168.0.0/16"}, nil),
		"swapped allows": with(cidrs{"192.168.0.0/16", "10.0.0.0/8"}, nil),
	} {
		h := specHash(nil, spec, nil, "")
		for other, oh := range hashes {
			if oh == h {
				t.Errorf("specs %q and %q hash alike (%s)", name, other, h)
			}
		}
		hashes[name] = h
	}
}
