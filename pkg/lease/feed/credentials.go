package feed

import (
	"context"
	"errors"
	"fmt"

	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Proxy credentials for the lease API's grants, read through the Secret
// informer's lister.

// errNoCredentials is wrapped by SecretCredentials' errors.
var errNoCredentials = errors.New("proxy credentials unavailable")

// SecretCredentials reads credentials from the Secret a leased proxy names
// (ProxyInfo.CredentialsSecret: spec.auth.secretRef, or the one generated
// for a Managed Proxy; keys username and password), through a lister, and
// only if it is marked for proxies (proxyaccess.ReadMarkedSecret): a grant,
// and so the gateway, never carries an unmarked Secret's password. It is
// the lease server's Credentials (server.CredentialsFunc); its errors name
// the proxy and the Secret, never a credential.
func SecretCredentials(secrets corelisters.SecretLister) func(context.Context, store.LeasedProxy) (*proxyaccess.Credentials, error) {
	return func(_ context.Context, p store.LeasedProxy) (*proxyaccess.Credentials, error) {
		if p.CredentialsSecret == "" {
			// No Secret: the proxy takes no credentials (an External
			// proxy without spec.auth), and the holder gets none.
			return nil, nil
		}
		creds, err := proxyaccess.ReadCredentials(p.CredentialsSecret, secrets.Secrets(p.Key.Namespace).Get)
		if err != nil {
			return nil, fmt.Errorf("%w: proxy %s: %w", errNoCredentials, p.Key, err)
		}
		return creds, nil
	}
}
