package provider

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// SecretReader reads a Secret of a namespace by name (a live read, or a
// lister's).
type SecretReader func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// ReadCredentials returns the credentials a provider configures proxy's
// instance with: those of its effective credentials Secret
// (proxyaccess.CredentialsSecret: spec.auth's, or the generated one), nil
// when it has none. Only a Secret marked for proxies is read
// (proxyaccess.ReadMarkedSecret): nothing of another one reaches an
// instance's user-data. A provider without a reader fails Permanent; a
// missing, unmarked or unusable Secret is Transient (fixing it heals a later retry; the
// controller reports it before calling Create). Errors name the provider,
// the Proxy and the Secret, never a value.
func ReadCredentials(ctx context.Context, providerName string, proxy *crawlv1alpha1.Proxy, read SecretReader) (*proxyaccess.Credentials, error) {
	secret := proxyaccess.CredentialsSecret(proxy)
	if secret == "" {
		return nil, nil
	}
	if read == nil {
		return nil, Permanent(fmt.Errorf("%s provider: the Proxy has a credentials Secret (spec.auth, or generated without it) but the provider has no Secrets reader", providerName))
	}
	creds, err := proxyaccess.ReadProxyCredentials(proxy, func(name string) (*corev1.Secret, error) { return read(ctx, proxy.Namespace, name) })
	if err != nil {
		return nil, Transient(fmt.Errorf("%s provider: Proxy %s/%s: %w", providerName, proxy.Namespace, proxy.Name, err))
	}
	return creds, nil
}
