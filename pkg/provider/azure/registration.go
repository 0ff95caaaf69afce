package azure

import (
	"context"
	"flag"
	"fmt"
	"os"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Registration is the azure provider as the operator's registry lists it:
// spec.azure, hashed whole, and the --azure-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderAzure,
		Block: provider.SpecBlock{Field: "azure", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.Azure
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the azure provider's operator flags.
type Settings struct {
	// SubscriptionID and ResourceGroup are where every azure VM is made;
	// required with the azure provider.
	SubscriptionID, ResourceGroup string
	// ClusterID tags every resource; required.
	ClusterID string
	// Location and SubnetID are the defaults of spec.azure.
	Location, SubnetID string
	// CredentialsSecret ("namespace/name", keys tenantID, clientID,
	// clientSecret) is the fallback to workload identity (docs/azure.md).
	CredentialsSecret string
}

const (
	clusterIDFlag         = "azure-cluster-id"
	credentialsSecretFlag = "azure-credentials-secret"
)

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.SubscriptionID, "azure-subscription-id", s.SubscriptionID, "Azure subscription of azure VMs; required when --providers includes azure.")
	fs.StringVar(&s.ResourceGroup, "azure-resource-group", s.ResourceGroup, "Resource group where azure VMs, their NICs, public IPs and security groups are made, the scope of the operator's role (docs/azure.md); required when --providers includes azure.")
	fs.StringVar(&s.ClusterID, clusterIDFlag, s.ClusterID, "Tag value that scopes every Azure resource to this cluster, unique among the clusters sharing the resource group (letters, digits, dashes, underscores); required when --providers includes azure.")
	fs.StringVar(&s.Location, "azure-location", s.Location, "Azure region (westeurope, eastus2, ...) of azure VMs whose spec.azure.location is empty.")
	fs.StringVar(&s.SubnetID, "azure-subnet-id", s.SubnetID, "Resource ID of the subnet azure VMs join when spec.azure.subnetID is empty.")
	fs.StringVar(&s.CredentialsSecret, credentialsSecretFlag, s.CredentialsSecret, "namespace/name of a Secret with a service principal's tenantID, clientID and clientSecret; empty: workload identity (docs/azure.md).")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	var errs []error
	if err := provider.CheckSecretFlag(credentialsSecretFlag, s.CredentialsSecret); err != nil {
		errs = append(errs, err)
	}
	if !enabled {
		return errs
	}
	az := crawlv1alpha1.ProviderAzure
	switch id := s.ClusterID; {
	case id == "":
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be set when --providers includes %s: a name unique to this cluster among those sharing the resource group, such as the cluster's name", az))
	case !cloudkit.IsTagValue(id):
		errs = append(errs, provider.FlagError(clusterIDFlag, "must be 1-63 letters, digits, dashes or underscores (it becomes an Azure tag value), got %q", id))
	}
	if s.SubscriptionID == "" {
		errs = append(errs, provider.FlagError("azure-subscription-id", "must be set when --providers includes %s", az))
	}
	if s.ResourceGroup == "" {
		errs = append(errs, provider.FlagError("azure-resource-group", "must be set when --providers includes %s: the group the operator's role is assigned on (docs/azure.md)", az))
	}
	return errs
}

// New acts as the service principal of the Secret --azure-credentials-secret
// names (read once, never logged), or else as the workload identity of the
// operator's service account.
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	var data map[string][]byte
	if ref := s.CredentialsSecret; ref != "" {
		secret, err := env.ReadSecret(ctx, credentialsSecretFlag, ref)
		if err != nil {
			return nil, err
		}
		data = secret.Data
	}
	cred, err := Credential(data)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", credentialsSecretFlag, s.CredentialsSecret, err)
	}
	p, err := New(Options{
		Credential: cred, SubscriptionID: s.SubscriptionID, ResourceGroup: s.ResourceGroup, ClusterID: s.ClusterID,
		Location: s.Location, SubnetID: s.SubnetID, Endpoint: os.Getenv(EndpointEnv), Secrets: env.Secrets,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
