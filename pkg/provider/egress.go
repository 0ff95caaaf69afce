package provider

import crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"

// EgressArgs returns cmd/forward-proxy's flags for a Proxy's spec.egress
// (--allow-cidr and --deny-cidr, in spec order); none when it is unset.
// Every provider that runs forward-proxy passes them, so the API's ranges
// mean the same on every provider. The API server has validated each range.
func EgressArgs(p *crawlv1alpha1.Proxy) []string {
	if p == nil || p.Spec.Egress == nil {
		return nil
	}
	var args []string
	for _, c := range p.Spec.Egress.AllowCIDRs {
		args = append(args, "--allow-cidr="+string(c))
	}
	for _, c := range p.Spec.Egress.DenyCIDRs {
		args = append(args, "--deny-cidr="+string(c))
	}
	return args
}
