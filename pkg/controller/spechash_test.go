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
		h := specHash(spec, nil, "")
		for other, oh := range hashes {
			if oh == h {
				t.Errorf("specs %q and %q hash alike (%s)", name, other, h)
			}
		}
		hashes[name] = h
	}
}

// TestSpecHashHetzner: a change of spec.hetzner is a new server.
func TestSpecHashHetzner(t *testing.T) {
	spec := func(serverType string) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner: &crawlv1alpha1.HetznerProvider{ServerTypes: []string{serverType}}}
	}
	if specHash(spec("cx22"), nil, "") == specHash(spec("cpx11"), nil, "") {
		t.Error("specs with other server types hash alike")
	}
}

// TestSpecHashDigitalOcean: a change of spec.digitalocean is a new droplet.
func TestSpecHashDigitalOcean(t *testing.T) {
	spec := func(size string) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderDigitalOcean,
			DigitalOcean: &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{size}}}
	}
	if specHash(spec("s-1vcpu-512mb-10gb"), nil, "") == specHash(spec("s-1vcpu-1gb"), nil, "") {
		t.Error("specs with other sizes hash alike")
	}
}

// TestSpecHashAzure: a change of spec.azure is a new VM.
func TestSpecHashAzure(t *testing.T) {
	spec := func(size string) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderAzure,
			Azure: &crawlv1alpha1.AzureProvider{VMSizes: []string{size}}}
	}
	if specHash(spec("Standard_B1s"), nil, "") == specHash(spec("Standard_B1ms"), nil, "") {
		t.Error("specs with other VM sizes hash alike")
	}
}
