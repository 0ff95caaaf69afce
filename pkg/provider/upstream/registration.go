package upstream

import (
	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the upstream provider as the operator's registry lists
// it: spec.upstream, of which nothing is hashed (nothing is provisioned:
// the username the block renders is the generated credentials Secret's,
// kept current by the controller, and a new session is a new Proxy;
// docs/decisions/0194-upstream-member-is-a-session.md), and no flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name:        crawlv1alpha1.ProviderUpstream,
		Block:       provider.SpecBlock{Field: "upstream"},
		NewSettings: provider.NoFlags(func() provider.Provider { return New() }),
	}
}
