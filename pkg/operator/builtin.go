package operator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
)

// BuiltinProviders are the providers compiled into the operator binary;
// --providers chooses which of them run.
func BuiltinProviders() ProviderRegistry {
	return ProviderRegistry{
		string(crawlv1alpha1.ProviderKubernetes): newKubernetesProvider,
		string(crawlv1alpha1.ProviderLocal):      newLocalProvider,
	}
}

func newKubernetesProvider(_ context.Context, env ProviderEnv) (provider.Provider, error) {
	return kubernetes.New(env.KubeClient, kubernetes.Options{DefaultImage: env.Options.KubernetesDefaultImage}), nil
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
