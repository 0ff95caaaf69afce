package gce

import (
	"context"
	"flag"
	"fmt"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the gce provider as the operator's registry lists it:
// spec.gce, hashed whole, and the --gce-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderGCE,
		Block: provider.SpecBlock{Field: "gce", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.GCE
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the gce provider's operator flags.
type Settings struct {
	// Project and Zone are the defaults of spec.gce.project and zone.
	Project, Zone string
	// CredentialsSecret ("namespace/name", key key.json) holds a
	// service-account key; empty for Application Default Credentials.
	CredentialsSecret string
}

const credentialsSecretFlag = "gce-credentials-secret"

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Project, "gce-project", s.Project, "Google Cloud project of gce instances whose spec.gce.project is empty.")
	fs.StringVar(&s.Zone, "gce-zone", s.Zone, "Compute Engine zone of gce instances whose spec.gce.zone is empty.")
	fs.StringVar(&s.CredentialsSecret, credentialsSecretFlag, s.CredentialsSecret, "namespace/name of a Secret whose key.json is a service-account key for the gce provider; empty: Application Default Credentials.")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(bool) []error {
	if err := provider.CheckSecretFlag(credentialsSecretFlag, s.CredentialsSecret); err != nil {
		return []error{err}
	}
	return nil
}

// New uses Application Default Credentials, or the service-account key in
// the Secret --gce-credentials-secret names (read once, never logged).
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	var key []byte
	if ref := s.CredentialsSecret; ref != "" {
		secret, err := env.ReadSecret(ctx, credentialsSecretFlag, ref)
		if err != nil {
			return nil, err
		}
		if key = secret.Data[CredentialsSecretKey]; len(key) == 0 {
			return nil, fmt.Errorf("--%s %s: no key %q", credentialsSecretFlag, ref, CredentialsSecretKey)
		}
	}
	p, err := New(ctx, Options{
		Project: s.Project, Zone: s.Zone, CredentialsJSON: key,
		// Read when a VM is created, for the credentials its metadata carries.
		Secrets: env.Secrets,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
