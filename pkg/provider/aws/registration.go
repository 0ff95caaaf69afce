package aws

import (
	"context"
	"flag"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/credentials"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the aws provider as the operator's registry lists it:
// spec.aws, hashed whole, and the --aws-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderAWS,
		Block: provider.SpecBlock{Field: "aws", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.AWS
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the aws provider's operator flags.
type Settings struct {
	// Region is the default of spec.aws.region.
	Region string
	// ClusterID tags every EC2 instance; required with the aws provider.
	ClusterID string
	// CredentialsSecret ("namespace/name") holds static keys; empty for
	// the SDK's default chain (docs/aws.md).
	CredentialsSecret string
}

const credentialsSecretFlag = "aws-credentials-secret"

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Region, "aws-region", s.Region, "AWS Region of aws instances whose spec.aws.region is empty.")
	fs.StringVar(&s.ClusterID, "aws-cluster-id", s.ClusterID, "Tag value that scopes every EC2 instance to this cluster, unique among the clusters sharing the AWS account (the cluster's name, say); required when --providers includes aws.")
	fs.StringVar(&s.CredentialsSecret, credentialsSecretFlag, s.CredentialsSecret, "namespace/name of a Secret with aws_access_key_id and aws_secret_access_key (and optional aws_session_token) for the aws provider; empty: the AWS SDK's default credential chain.")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	var errs []error
	if err := provider.CheckSecretFlag(credentialsSecretFlag, s.CredentialsSecret); err != nil {
		errs = append(errs, err)
	}
	if enabled && s.ClusterID == "" {
		errs = append(errs, provider.FlagError("aws-cluster-id", "must be set when --providers includes %s: a name unique to this cluster among those sharing the AWS account, such as the cluster's name", crawlv1alpha1.ProviderAWS))
	}
	return errs
}

// New uses the SDK's default credential chain, or the static keys of the
// Secret --aws-credentials-secret names (read once, never logged).
func (s *Settings) New(ctx context.Context, env provider.Env) (provider.Provider, error) {
	opts := Options{Region: s.Region, ClusterID: s.ClusterID, Secrets: env.Secrets}
	if ref := s.CredentialsSecret; ref != "" {
		secret, err := env.ReadSecret(ctx, credentialsSecretFlag, ref)
		if err != nil {
			return nil, err
		}
		id, key := secret.Data["aws_access_key_id"], secret.Data["aws_secret_access_key"]
		if len(id) == 0 || len(key) == 0 {
			return nil, fmt.Errorf("--%s %s: needs the keys aws_access_key_id and aws_secret_access_key", credentialsSecretFlag, ref)
		}
		opts.Credentials = credentials.NewStaticCredentialsProvider(string(id), string(key), string(secret.Data["aws_session_token"]))
	}
	p, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return p, nil
}
