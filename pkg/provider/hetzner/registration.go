package hetzner

import (
	"context"
	"flag"
	"os"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the hetzner provider as the operator's registry lists
// it: spec.hetzner, hashed whole, and the --hetzner-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderHetzner,
		Block: provider.SpecBlock{Field: "hetzner", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.Hetzner
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the hetzner provider's operator flags.
type Settings struct {
	// Location is the default of spec.hetzner.location.
	Location string
	// ClusterID labels every server; required with the hetzner provider.
	ClusterID string
	// TokenSecret ("namespace/name", key token) holds the project's API
	// token; required (docs/hetzner.md).
	TokenSecret string
}

const (
	clusterIDFlag   = "hetzner-cluster-id"
	tokenSecretFlag = "hetzner-token-secret"
)

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Location, "hetzner-location", s.Location, "Hetzner Cloud location (fsn1, nbg1, hel1, ash, ...) of hetzner servers whose spec.hetzner.location is empty.")
	fs.StringVar(&s.ClusterID, clusterIDFlag, s.ClusterID, "Label value that scopes every Hetzner Cloud server to this cluster, unique among the clusters sharing the project; required when --providers includes hetzner.")
	fs.StringVar(&s.TokenSecret, tokenSecretFlag, s.TokenSecret, "namespace/name of a Secret whose key token is a Read & Write API token of the Hetzner Cloud project; required when --providers includes hetzner.")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	var errs []error
	if err := provider.CheckSecretFlag(tokenSecretFlag, s.TokenSecret); err != nil {
		errs = append(errs, err)
	}
	if enabled && s.ClusterID == "" {
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be set when --providers includes %s: a name unique to this cluster among those sharing the Hetzner Cloud project, such as the cluster's name", crawlv1alpha1.ProviderHetzner))
	}
	if enabled && s.TokenSecret == "" {
		errs = append(errs, provider.FlagError(tokenSecretFlag, "must be set when --providers includes %s: the Secret holding the project's API token (docs/hetzner.md)", crawlv1alpha1.ProviderHetzner))
	}
	return errs
}

// New reads the project's API token from the Secret --hetzner-token-secret
// names (once, never logged); $HCLOUD_ENDPOINT, as for Hetzner's CLI,
// replaces the API's address (tests, an egress proxy).
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	token, err := env.ReadToken(ctx, tokenSecretFlag, s.TokenSecret, TokenSecretKey)
	if err != nil {
		return nil, err
	}
	p, err := New(Options{
		Token: token, ClusterID: s.ClusterID, Location: s.Location,
		Endpoint: os.Getenv(EndpointEnv), Secrets: env.Secrets,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
