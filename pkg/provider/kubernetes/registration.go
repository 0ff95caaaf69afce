package kubernetes

import (
	"context"
	"flag"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the kubernetes provider as the operator's registry lists
// it: spec.kubernetes, hashed whole, and --kubernetes-default-image.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderKubernetes,
		Block: provider.SpecBlock{Field: "kubernetes", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.Kubernetes
		}},
		NewSettings: func() provider.Settings { return &Settings{DefaultImage: DefaultImage} },
	}
}

// Settings are the kubernetes provider's operator flags.
type Settings struct {
	// DefaultImage is the Pod image when spec.kubernetes.image is empty.
	DefaultImage string
}

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.DefaultImage, "kubernetes-default-image", s.DefaultImage, "The image of Pod instances whose spec.kubernetes.image is empty (a forward-proxy build).")
}

// Validate is provider.Settings.Validate: every value is usable.
func (s *Settings) Validate(bool) []error { return nil }

// New makes Pods in the Proxies' namespaces through the operator's client.
func (s *Settings) New(_ context.Context, env provider.Env) (provider.Provider, error) {
	return New(env.KubeClient, Options{DefaultImage: s.DefaultImage, OperatorNamespace: env.OperatorNamespace}), nil
}
