package controller

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// An upstream Proxy (a proxy network's session) keeps its credentials in
// its generated Secret like any Managed Proxy, so that the health engine,
// the lease API and the gateway read them by the one rule: the username
// rendered from spec.upstream.usernameTemplate for its session, and the
// account's password copied from spec.upstream.credentialsSecretRef. The
// controller keeps the copy current when either changes.

// isUpstream reports whether p is a session of a proxy network.
func isUpstream(p *crawlv1alpha1.Proxy) bool {
	return p.Spec.Provider == crawlv1alpha1.ProviderUpstream && p.Spec.Upstream != nil
}

// upstreamCredentials are what p's generated Secret must hold. Errors name
// the Secret and the field, never a value.
func (c *Controller) upstreamCredentials(p *crawlv1alpha1.Proxy) (*proxyaccess.Credentials, error) {
	name := p.Spec.Upstream.CredentialsSecretRef.Name
	secret, err := c.secrets.Secrets(p.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &proxyaccess.CredentialsError{Secret: name, Problem: "not found (spec.upstream.credentialsSecretRef)"}
	case err != nil:
		return nil, fmt.Errorf("reading credentials Secret %q: %w", name, err)
	}
	password := secret.Data[crawlv1alpha1.AuthPasswordKey]
	if len(password) == 0 {
		return nil, &proxyaccess.CredentialsError{Secret: name, Key: crawlv1alpha1.AuthPasswordKey, Problem: "is missing or empty (spec.upstream.credentialsSecretRef)"}
	}
	return &proxyaccess.Credentials{Username: upstream.Username(p.Spec.Upstream, p.UID), Password: string(password)}, nil
}
