package digitalocean

import (
	"context"
	"flag"
	"os"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Registration is the digitalocean provider as the operator's registry
// lists it: spec.digitalocean, hashed whole, and the --digitalocean-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderDigitalOcean,
		Block: provider.SpecBlock{Field: "digitalocean", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.DigitalOcean
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the digitalocean provider's operator flags.
type Settings struct {
	// Region is the default of spec.digitalocean.region.
	Region string
	// ClusterID tags every droplet; required with the digitalocean provider.
	ClusterID string
	// TokenSecret ("namespace/name", key token) holds the scoped API token;
	// required (docs/digitalocean.md).
	TokenSecret string
}

const (
	clusterIDFlag   = "digitalocean-cluster-id"
	tokenSecretFlag = "digitalocean-token-secret"
)

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Region, "digitalocean-region", s.Region, "DigitalOcean region (nyc3, ams3, fra1, ...) of digitalocean droplets whose spec.digitalocean.region is empty.")
	fs.StringVar(&s.ClusterID, clusterIDFlag, s.ClusterID, "Tag value that scopes every DigitalOcean droplet to this cluster, unique among the clusters sharing the account (letters, digits, dashes, underscores); required when --providers includes digitalocean.")
	fs.StringVar(&s.TokenSecret, tokenSecretFlag, s.TokenSecret, "namespace/name of a Secret whose key token is a DigitalOcean API token with the scopes docs/digitalocean.md lists; required when --providers includes digitalocean.")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	var errs []error
	if err := provider.CheckSecretFlag(tokenSecretFlag, s.TokenSecret); err != nil {
		errs = append(errs, err)
	}
	if !enabled {
		return errs
	}
	switch id := s.ClusterID; {
	case id == "":
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be set when --providers includes %s: a name unique to this cluster among those sharing the DigitalOcean account, such as the cluster's name", crawlv1alpha1.ProviderDigitalOcean))
	case !cloudkit.IsTagValue(id):
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be 1-63 letters, digits, dashes or underscores (it becomes a DigitalOcean tag), got %q", id))
	}
	if s.TokenSecret == "" {
		errs = append(errs, provider.FlagError(tokenSecretFlag, "must be set when --providers includes %s: the Secret holding the scoped API token (docs/digitalocean.md)", crawlv1alpha1.ProviderDigitalOcean))
	}
	return errs
}

// New reads the API token from the Secret --digitalocean-token-secret
// names (once, never logged).
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	token, err := env.ReadToken(ctx, tokenSecretFlag, s.TokenSecret, TokenSecretKey)
	if err != nil {
		return nil, err
	}
	p, err := New(Options{
		Token: token, ClusterID: s.ClusterID, Region: s.Region,
		Endpoint: os.Getenv(EndpointEnv), Secrets: env.Secrets,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
