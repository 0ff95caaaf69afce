package session

import (
	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the session provider as the operator's registry lists
// it: spec.session, hashed whole (another instance is another session),
// and no flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderSession,
		Block: provider.SpecBlock{Field: "session", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.Session
		}},
		NewSettings: provider.NoFlags(func() provider.Provider { return New() }),
	}
}
