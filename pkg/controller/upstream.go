package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

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

// upstreamCredentials are what p's generated Secret must hold. The
// account's Secret goes through the one gate every credentials reader goes
// through (proxyaccess.ReadMarkedSecret): the password is copied only from a
// Secret marked for proxies. Errors name the field and the Secret, never a
// value.
func (c *Controller) upstreamCredentials(p *crawlv1alpha1.Proxy) (*proxyaccess.Credentials, error) {
	name := p.Spec.Upstream.CredentialsSecretRef.Name
	secret, err := proxyaccess.ReadMarkedSecret(proxyaccess.FieldUpstreamCredentialsSecretRef, name, c.secrets.Secrets(p.Namespace).Get)
	if err != nil {
		return nil, err
	}
	password := secret.Data[crawlv1alpha1.AuthPasswordKey]
	if len(password) == 0 {
		return nil, &proxyaccess.CredentialsError{Field: proxyaccess.FieldUpstreamCredentialsSecretRef, Secret: name, Key: crawlv1alpha1.AuthPasswordKey, Problem: "is missing or empty"}
	}
	return &proxyaccess.Credentials{Username: upstream.Username(p.Spec.Upstream, p.UID), Password: string(password)}, nil
}

// dropUpstreamCopy deletes p's generated Secret, the copy of an account's
// password whose Secret is no longer marked for proxies: readers of the
// copy cannot see where it came from, so the copy goes with the mark. It
// comes back when the mark does.
func (c *Controller) dropUpstreamCopy(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	name := proxyaccess.GeneratedCredentialsSecret(p)
	existing, err := c.secrets.Secrets(p.Namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(existing, p)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading credentials Secret %q: %w", name, err)
	}
	err = c.kube.CoreV1().Secrets(p.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted by an earlier pass; the cache had yet to show it
	case err != nil:
		return fmt.Errorf("deleting credentials Secret %q: %w", name, err)
	}
	klog.FromContext(ctx).Info("Deleted the copy of an upstream password whose Secret is not marked for proxies", "secret", name)
	return nil
}
