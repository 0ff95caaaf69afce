package operator

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
)

// BuiltinProviders are the providers compiled into the operator binary;
// --providers chooses which of them run.
func BuiltinProviders() ProviderRegistry {
	return ProviderRegistry{
		string(crawlv1alpha1.ProviderKubernetes): newKubernetesProvider,
		string(crawlv1alpha1.ProviderLocal):      newLocalProvider,
		string(crawlv1alpha1.ProviderGCE):        newGCEProvider,
	}
}

// newGCEProvider uses Application Default Credentials, or the service-account
// key in the Secret --gce-credentials-secret names (read once, never logged).
func newGCEProvider(ctx context.Context, env ProviderEnv) (provider.Provider, error) {
	var key []byte
	if ref := env.Options.GCECredentialsSecret; ref != "" {
		namespace, name, _ := strings.Cut(ref, "/")
		var secret *corev1.Secret
		err := untilAPIAnswers(ctx, "--gce-credentials-secret", func(ctx context.Context) (err error) {
			secret, err = env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("--gce-credentials-secret %s: %w", ref, err)
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
		StateDir: env.Options.LocalStateDir,
		// Read only when an instance with spec.auth is created.
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return env.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
}
