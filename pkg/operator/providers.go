package operator

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// registeredProvider is a provider of the registry with the settings (the
// flags) of one command line.
type registeredProvider struct {
	provider.Registration
	settings provider.Settings
}

// Registry is the providers o was made for (NewOptions): those
// --providers may enable.
func (o *Options) Registry() provider.Registry {
	registry := make(provider.Registry, 0, len(o.registered))
	for _, r := range o.registered {
		registry = append(registry, r.Registration)
	}
	return registry
}

// ProviderSettings are the settings (the flags) of the registered provider
// called name; nil when none is.
func (o *Options) ProviderSettings(name crawlv1alpha1.ProviderName) provider.Settings {
	for _, r := range o.registered {
		if r.Name == name {
			return r.settings
		}
	}
	return nil
}

// buildProviders builds each provider --providers enables, from its
// settings, at start-up on every replica.
func buildProviders(ctx context.Context, o Options, env provider.Env) (map[crawlv1alpha1.ProviderName]provider.Provider, error) {
	out := make(map[crawlv1alpha1.ProviderName]provider.Provider, len(o.Providers))
	for _, name := range o.Providers {
		settings := o.ProviderSettings(crawlv1alpha1.ProviderName(name))
		if settings == nil { // Validate refuses it first
			return nil, fmt.Errorf("--providers: unknown provider %q (known: %s)", name, strings.Join(o.Registry().Names(), ", "))
		}
		p, err := settings.New(ctx, env)
		if err != nil {
			return nil, fmt.Errorf("--providers: starting provider %q: %w", name, err)
		}
		out[crawlv1alpha1.ProviderName(name)] = p
	}
	return out, nil
}

// providerEnv is what the operator gives a provider it builds.
func providerEnv(kube kubernetes.Interface, o Options) provider.Env {
	return provider.Env{KubeClient: kube, OperatorNamespace: o.PodNamespace, ReadSecret: secretReader(kube)}
}

// secretReader reads the Secret a provider's flag names as namespace/name,
// waiting for the API server to answer (provider.Env.ReadSecret).
func secretReader(kube kubernetes.Interface) func(ctx context.Context, flag, ref string) (*corev1.Secret, error) {
	return func(ctx context.Context, flag, ref string) (*corev1.Secret, error) {
		namespace, name, _ := strings.Cut(ref, "/")
		var secret *corev1.Secret
		err := untilAPIAnswers(ctx, "--"+flag, func(ctx context.Context) (err error) {
			secret, err = kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", flag, ref, err)
		}
		return secret, nil
	}
}
