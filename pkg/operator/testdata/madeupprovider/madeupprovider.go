// Package madeupprovider is a made-up cloud, "madeup", that registers itself
// as a real one does: one exported Registration with its name, its spec
// block and what of it is hashed, and its flags. Tests compile it into a
// registry of one more line and find it in the operator's flags, in what
// --providers accepts, among the providers built at start-up and in the
// spec hash (pkg/operator/registry_test.go,
// pkg/controller/spechash_registry_test.go;
// docs/decisions/0440-providers-register-themselves.md).
//
// A real cloud's block is a new field of the Proxy spec in pkg/apis, which
// the CRD and the generated code are made from; a test cannot add one. So
// this cloud stands in for one whose block has the shape of spec.gce: it
// declares that field, and the registries it is tested in leave gce out
// (a block has one owner, provider.Registry.Check). Of the block it hashes
// the zone, the machine type, the image and the port; network tags it would
// set on a running VM, so a change of them makes no new one.
//
// Its instances live in memory (pkg/testing/provider/fake): it is here to
// be registered, not to run anything.
package madeupprovider

import (
	"context"
	"flag"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
)

// Name is the made-up cloud's spec.provider value.
const Name crawlv1alpha1.ProviderName = "madeup"

// TokenSecretKey is the key of the API token in the Secret
// --madeup-token-secret names.
const TokenSecretKey = "token"

// Registration is the made-up cloud as a registry lists it.
func Registration() provider.Registration {
	return provider.Registration{
		Name: Name,
		Block: provider.SpecBlock{Field: "gce", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			if s.GCE == nil {
				return nil
			}
			return hashed{Zone: s.GCE.Zone, MachineType: s.GCE.MachineType, SourceImage: s.GCE.SourceImage, Port: s.GCE.Port}
		}},
		NewSettings: func() provider.Settings { return &Settings{Region: "mars-1"} },
	}
}

// hashed is what of the block makes an instance.
type hashed struct {
	Zone        string `json:"zone,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	SourceImage string `json:"sourceImage,omitempty"`
	Port        int32  `json:"port,omitempty"`
}

// Settings are the made-up cloud's operator flags.
type Settings struct {
	// Region is where its instances are made (default mars-1).
	Region string
	// ClusterID tags its instances; required with the provider.
	ClusterID string
	// TokenSecret ("namespace/name", key token) holds its API token;
	// required with the provider.
	TokenSecret string
}

const (
	clusterIDFlag   = "madeup-cluster-id"
	tokenSecretFlag = "madeup-token-secret"
)

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Region, "madeup-region", s.Region, "Region of madeup instances.")
	fs.StringVar(&s.ClusterID, clusterIDFlag, s.ClusterID, "Tag value that scopes madeup instances to this cluster; required when --providers includes madeup.")
	fs.StringVar(&s.TokenSecret, tokenSecretFlag, s.TokenSecret, "namespace/name of a Secret whose key token is the madeup API token; required when --providers includes madeup.")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	var errs []error
	if err := provider.CheckSecretFlag(tokenSecretFlag, s.TokenSecret); err != nil {
		errs = append(errs, err)
	}
	if enabled && s.ClusterID == "" {
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be set when --providers includes %s", Name))
	}
	if enabled && s.TokenSecret == "" {
		errs = append(errs, provider.FlagError(tokenSecretFlag, "must be set when --providers includes %s", Name))
	}
	return errs
}

// Provider is a built made-up cloud: what its flags and its token Secret
// said, over instances in memory.
type Provider struct {
	*fake.Provider
	Region, ClusterID string
	// TokenLength is the length of the token it read (never the token).
	TokenLength int
}

// New reads the API token from the Secret --madeup-token-secret names.
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	token, err := env.ReadToken(ctx, tokenSecretFlag, s.TokenSecret, TokenSecretKey)
	if err != nil {
		return nil, err
	}
	return &Provider{Provider: fake.New(), Region: s.Region, ClusterID: s.ClusterID, TokenLength: len(token)}, nil
}
