package operator

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/provider/azure"
	"github.com/proxyfleet/proxy-operator/pkg/provider/digitalocean"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/provider/hetzner"
	"github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/provider/session"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
)

// BuiltinProviders are the providers compiled into the operator binary;
// --providers chooses which of them run.
func BuiltinProviders() ProviderRegistry {
	return ProviderRegistry{
		string(crawlv1alpha1.ProviderKubernetes):   newKubernetesProvider,
		string(crawlv1alpha1.ProviderLocal):        newLocalProvider,
		string(crawlv1alpha1.ProviderGCE):          newGCEProvider,
		string(crawlv1alpha1.ProviderAWS):          newAWSProvider,
		string(crawlv1alpha1.ProviderHetzner):      newHetznerProvider,
		string(crawlv1alpha1.ProviderDigitalOcean): newDigitalOceanProvider,
		string(crawlv1alpha1.ProviderAzure):        newAzureProvider,
		string(crawlv1alpha1.ProviderUpstream): func(context.Context, ProviderEnv) (provider.Provider, error) {
			return upstream.New(), nil
		},
		string(crawlv1alpha1.ProviderSession): func(context.Context, ProviderEnv) (provider.Provider, error) {
			return session.New(), nil
		},
	}
}

// newAWSProvider uses the SDK's default credential chain, or the static
// keys of the Secret --aws-credentials-secret names (read once, never
// logged).
func newAWSProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	opts := aws.Options{
		Region: env.Options.AWSRegion, ClusterID: env.Options.AWSClusterID,
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	}
	if ref := env.Options.AWSCredentialsSecret; ref != "" {
		secret, err := readSecret(ctx, env, "--aws-credentials-secret", ref)
		if err != nil {
			return nil, err
		}
		id, key := secret.Data["aws_access_key_id"], secret.Data["aws_secret_access_key"]
		if len(id) == 0 || len(key) == 0 {
			return nil, fmt.Errorf("--aws-credentials-secret %s: needs the keys aws_access_key_id and aws_secret_access_key", ref)
		}
		opts.Credentials = credentials.NewStaticCredentialsProvider(string(id), string(key), string(secret.Data["aws_session_token"]))
	}
	return aws.New(ctx, opts)
}

// newHetznerProvider reads the project's API token from the Secret
// --hetzner-token-secret names (once, never logged); $HCLOUD_ENDPOINT, as
// for Hetzner's CLI, replaces the API's address (tests, an egress proxy).
func newHetznerProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	secret, err := readSecret(ctx, env, "--hetzner-token-secret", env.Options.HetznerTokenSecret)
	if err != nil {
		return nil, err
	}
	token := strings.TrimSpace(string(secret.Data[hetzner.TokenSecretKey]))
	if token == "" {
		return nil, fmt.Errorf("--hetzner-token-secret %s: no key %q", env.Options.HetznerTokenSecret, hetzner.TokenSecretKey)
	}
	return hetzner.New(hetzner.Options{
		Token: token, ClusterID: env.Options.HetznerClusterID, Location: env.Options.HetznerLocation,
		Endpoint: os.Getenv(hetzner.EndpointEnv),
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}

// newDigitalOceanProvider reads the API token from the Secret
// --digitalocean-token-secret names (once, never logged).
func newDigitalOceanProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	secret, err := readSecret(ctx, env, "--digitalocean-token-secret", env.Options.DigitalOceanTokenSecret)
	if err != nil {
		return nil, err
	}
	token := strings.TrimSpace(string(secret.Data[digitalocean.TokenSecretKey]))
	if token == "" {
		return nil, fmt.Errorf("--digitalocean-token-secret %s: no key %q", env.Options.DigitalOceanTokenSecret, digitalocean.TokenSecretKey)
	}
	return digitalocean.New(digitalocean.Options{
		Token: token, ClusterID: env.Options.DigitalOceanClusterID, Region: env.Options.DigitalOceanRegion,
		Endpoint: os.Getenv(digitalocean.EndpointEnv),
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}

// newAzureProvider acts as the service principal of the Secret
// --azure-credentials-secret names (read once, never logged), or else as
// the workload identity of the operator's service account.
func newAzureProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	var data map[string][]byte
	if ref := env.Options.AzureCredentialsSecret; ref != "" {
		secret, err := readSecret(ctx, env, "--azure-credentials-secret", ref)
		if err != nil {
			return nil, err
		}
		data = secret.Data
	}
	cred, err := azure.Credential(data)
	if err != nil {
		return nil, fmt.Errorf("--azure-credentials-secret %s: %w", env.Options.AzureCredentialsSecret, err)
	}
	o := env.Options
	return azure.New(azure.Options{
		Credential: cred, SubscriptionID: o.AzureSubscriptionID, ResourceGroup: o.AzureResourceGroup, ClusterID: o.AzureClusterID,
		Location: o.AzureLocation, SubnetID: o.AzureSubnetID, Endpoint: os.Getenv(azure.EndpointEnv),
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}

// readSecret reads the Secret a flag names as namespace/name, waiting for
// the API server to answer.
func readSecret(ctx context.Context, env ProviderEnv, flag, ref string) (*corev1.Secret, error) {
	namespace, name, _ := strings.Cut(ref, "/")
	var secret *corev1.Secret
	err := untilAPIAnswers(ctx, flag, func(ctx context.Context) (err error) {
		secret, err = env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, ref, err)
	}
	return secret, nil
}

// newGCEProvider uses Application Default Credentials, or the service-account
// key in the Secret --gce-credentials-secret names (read once, never logged).
func newGCEProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	var key []byte
	if ref := env.Options.GCECredentialsSecret; ref != "" {
		secret, err := readSecret(ctx, env, "--gce-credentials-secret", ref)
		if err != nil {
			return nil, err
		}
		if key = secret.Data[gce.CredentialsSecretKey]; len(key) == 0 {
			return nil, fmt.Errorf("--gce-credentials-secret %s: no key %q", ref, gce.CredentialsSecretKey)
		}
	}
	return gce.New(ctx, gce.Options{
		Project: env.Options.GCEProject, Zone: env.Options.GCEZone, CredentialsJSON: key,
		// Read when a VM is created, for the credentials its metadata carries.
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}

func newKubernetesProvider(_ context.Context, env ProviderEnv) (provider.Provider, error) {
	return kubernetes.New(env.KubeClient, kubernetes.Options{DefaultImage: env.Options.KubernetesDefaultImage, OperatorNamespace: env.Options.PodNamespace}), nil
}

func newLocalProvider(_ context.Context, env ProviderEnv) (provider.Provider, error) {
	return local.New(local.Options{
		StateDir:      env.Options.LocalStateDir,
		LoopbackExits: env.Options.LocalLoopbackExits,
		// Read only when an instance with spec.auth is created.
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}
