package operator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// ProviderRegistry maps a provider name (a spec.provider value) to the
// factory that builds it. main passes the providers compiled into the binary;
// --providers chooses which of them are enabled.
type ProviderRegistry map[string]ProviderFactory

// ProviderFactory builds one enabled provider at start-up, on every replica
// (leader or not), so it must not start background work or touch instances:
// only the leader's controller calls the provider.
type ProviderFactory func(ctx context.Context, env ProviderEnv) (provider.Provider, error)

// ProviderEnv is what a provider may need from the operator.
type ProviderEnv struct {
	// KubeClient talks to the cluster the operator runs against (the Pod
	// provider creates its Pods there).
	KubeClient kubernetes.Interface
	// RESTConfig is the operator's client config (QPS, user agent, credentials).
	RESTConfig *rest.Config
	// Options are the operator's flags; LocalStateDir and Namespace, say.
	Options Options
}

// buildProviders builds each provider --providers enables.
func buildProviders(ctx context.Context, names []string, registry ProviderRegistry, env ProviderEnv) (map[crawlv1alpha1.ProviderName]provider.Provider, error) {
	out := make(map[crawlv1alpha1.ProviderName]provider.Provider, len(names))
	for _, name := range names {
		factory, ok := registry[name]
		if !ok {
			built := slices.Sorted(maps.Keys(registry))
			if len(built) == 0 {
				built = []string{"none"}
			}
			return nil, fmt.Errorf("--providers: provider %q is not built into this binary (built in: %s)", name, strings.Join(built, ", "))
		}
		p, err := factory(ctx, env)
		if err != nil {
			return nil, fmt.Errorf("--providers: starting provider %q: %w", name, err)
		}
		out[crawlv1alpha1.ProviderName(name)] = p
	}
	return out, nil
}
