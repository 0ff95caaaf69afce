// Package kubeconfig finds the API server the way the operator's commands
// do: an explicit file, else $KUBECONFIG, else the in-cluster config.
package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load loads --kubeconfig, else $KUBECONFIG (a list of files, as
// kubectl reads it), else the in-cluster config.
func Load(kubeconfig string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	source := "--kubeconfig " + kubeconfig
	switch env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case kubeconfig != "":
		rules.ExplicitPath = kubeconfig
	case env != "":
		rules.Precedence = filepath.SplitList(env)
		source = "$KUBECONFIG"
	default:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or $KUBECONFIG, and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return cfg, nil
}
