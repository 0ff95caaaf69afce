package controller

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// ConditionAuthenticated says whether clients must authenticate to the
// proxy. Only an External Proxy without spec.auth carries it (False,
// ReasonNoCredentials): a Managed one always has credentials, the user's or
// generated ones.
const ConditionAuthenticated = "Authenticated"

// ReasonNoCredentials: an External Proxy without spec.auth, open to anyone
// who can reach it.
const ReasonNoCredentials = "NoCredentials"

// messageNoCredentials is the Authenticated condition's message for an
// External Proxy without spec.auth.
const messageNoCredentials = "spec.auth is not set: the proxy is open to anyone who can reach it, and leases carry no credentials"

// GeneratedCredentialsLabel marks the credentials Secrets the controller
// generates; its value is the Proxy's name, for kubectl get -l.
const GeneratedCredentialsLabel = "crawl.proxyfleet.io/generated-credentials-for"

// generatedUsernameBytes and generatedPasswordBytes are the random bytes
// behind a generated username and password (before base64).
const (
	generatedUsernameBytes = 9
	generatedPasswordBytes = 24
)

// generatedChange is what ensureGeneratedCredentials did to the generated
// Secret.
type generatedChange int

const (
	// generatedAsIs: the cache holds the Secret as it must be (its content
	// may have been rewritten just now: rendered credentials, which the
	// controller does not read back).
	generatedAsIs generatedChange = iota
	// generatedCreated: created just now.
	generatedCreated
	// generatedMarked: marked for proxies just now (a Secret generated
	// before the mark existed); the cache still holds it unmarked.
	generatedMarked
)

// ensureGeneratedCredentials makes sure a Managed Proxy without spec.auth has
// its generated credentials Secret, marked for proxies, and says what it
// changed: after a create or a mark the caller waits for the Secret's
// informer event (the providers and the health engine read it from the
// cache, and refuse it unmarked) before it reads the Secret or creates an
// instance. A Secret of that name that this Proxy does not control is an
// error, never overwritten. The Secret holds random credentials, or those
// the Proxy's provider renders (provider.CredentialsRenderer: a proxy
// network's session), kept current when they change.
func (c *Controller) ensureGeneratedCredentials(ctx context.Context, p *crawlv1alpha1.Proxy) (generatedChange, error) {
	want, err := c.providers.RenderCredentials(p, c.markedSecretReader(p.Namespace))
	if err != nil {
		if proxyaccess.IsNotMarked(err) {
			err = errors.Join(err, c.dropRenderedCopy(ctx, p))
		}
		return generatedAsIs, err
	}
	name := proxyaccess.GeneratedCredentialsSecret(p)
	existing, err := c.secrets.Secrets(p.Namespace).Get(name)
	switch {
	case err == nil:
		if !metav1.IsControlledBy(existing, p) {
			return generatedAsIs, &proxyaccess.CredentialsError{Secret: name, Problem: "exists but is not controlled by this Proxy; delete it, or set spec.auth"}
		}
		return c.updateGeneratedSecret(ctx, existing, want)
	case !apierrors.IsNotFound(err):
		return generatedAsIs, fmt.Errorf("reading credentials Secret %q: %w", name, err)
	}
	secret, err := generatedCredentialsSecret(p)
	if err != nil {
		return generatedAsIs, err
	}
	if want != nil {
		secret.Data = map[string][]byte{
			crawlv1alpha1.AuthUsernameKey: []byte(want.Username),
			crawlv1alpha1.AuthPasswordKey: []byte(want.Password),
		}
	}
	_, err = c.kube.CoreV1().Secrets(p.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass whose Secret the cache has not shown yet;
		// its informer event brings the Proxy back.
		return generatedCreated, nil
	}
	if err != nil {
		return generatedAsIs, fmt.Errorf("creating credentials Secret %q: %w", name, err)
	}
	klog.FromContext(ctx).Info("Generated credentials for a Proxy without spec.auth", "secret", name)
	return generatedCreated, nil
}

// markedSecretReader reads Secrets of namespace from the cache through the
// one gate every credentials reader goes through
// (proxyaccess.ReadMarkedSecret): a provider rendering credentials gets a
// Secret only when it is marked for proxies.
func (c *Controller) markedSecretReader(namespace string) provider.MarkedSecretReader {
	get := c.secrets.Secrets(namespace).Get
	return func(field, name string) (*corev1.Secret, error) {
		return proxyaccess.ReadMarkedSecret(field, name, get)
	}
}

// dropRenderedCopy deletes p's generated Secret, a copy of rendered
// credentials (an account's password) whose source Secret is no longer
// marked for proxies: readers of the copy cannot see where it came from, so
// the copy goes with the mark. It comes back when the mark does.
func (c *Controller) dropRenderedCopy(ctx context.Context, p *crawlv1alpha1.Proxy) error {
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
	klog.FromContext(ctx).Info("Deleted a copy of rendered credentials whose source Secret is not marked for proxies", "secret", name)
	return nil
}

// updateGeneratedSecret writes want into the generated Secret when it holds
// something else (nil want: nothing to keep current), and marks it for
// proxies when it is not: a Secret generated before the mark existed gets
// it on the first sync after the upgrade.
func (c *Controller) updateGeneratedSecret(ctx context.Context, existing *corev1.Secret, want *proxyaccess.Credentials) (generatedChange, error) {
	stale := want != nil && (string(existing.Data[crawlv1alpha1.AuthUsernameKey]) != want.Username ||
		string(existing.Data[crawlv1alpha1.AuthPasswordKey]) != want.Password)
	marked := proxyaccess.MarkedForProxies(existing)
	if !stale && marked {
		return generatedAsIs, nil
	}
	updated := existing.DeepCopy()
	if stale {
		updated.Data = map[string][]byte{
			crawlv1alpha1.AuthUsernameKey: []byte(want.Username),
			crawlv1alpha1.AuthPasswordKey: []byte(want.Password),
		}
	}
	if !marked {
		if updated.Labels == nil {
			updated.Labels = map[string]string{}
		}
		updated.Labels[crawlv1alpha1.ProxyCredentialsLabel] = crawlv1alpha1.ProxyCredentialsLabelValue
	}
	if _, err := c.kube.CoreV1().Secrets(existing.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return generatedAsIs, fmt.Errorf("updating credentials Secret %q: %w", existing.Name, err)
	}
	klog.FromContext(ctx).Info("Updated a generated credentials Secret", "secret", existing.Name, "credentials", stale, "markAdded", !marked)
	if !marked {
		return generatedMarked, nil
	}
	return generatedAsIs, nil
}

// generatedCredentialsSecret is a new credentials Secret for p with random
// username, password and lease key, controlled by p so that the garbage
// collector deletes it with the Proxy. Rendered credentials (a proxy
// network's) replace the username and password and keep no key: a network
// checks no lease.
func generatedCredentialsSecret(p *crawlv1alpha1.Proxy) (*corev1.Secret, error) {
	username, err := randomToken(generatedUsernameBytes)
	if err != nil {
		return nil, err
	}
	password, err := randomToken(generatedPasswordBytes)
	if err != nil {
		return nil, err
	}
	leaseKey, err := leasecred.NewKeyText()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace,
			Name:      proxyaccess.GeneratedCredentialsSecret(p),
			Labels: map[string]string{
				GeneratedCredentialsLabel: p.Name,
				// Readers take credentials only from marked Secrets
				// (proxyaccess.ReadMarkedSecret), the operator's own too.
				crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue,
			},
			// Controller, without blockOwnerDeletion: that would need update
			// on proxies/finalizers where OwnerReferencesPermissionEnforcement
			// is on, and nothing waits on this Secret's deletion.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: crawlv1alpha1.SchemeGroupVersion.String(), Kind: "Proxy",
				Name: p.Name, UID: p.UID, Controller: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			crawlv1alpha1.AuthUsernameKey: []byte("u" + username),
			crawlv1alpha1.AuthPasswordKey: []byte(password),
			// The instance's own key, which signs its leases' credentials
			// (docs/decisions/0400-a-lease-is-a-key.md).
			leasecred.SecretKey: []byte(leaseKey),
		},
	}, nil
}

// randomToken is n bytes from crypto/rand, URL-safe base64 without padding:
// no ':' (basic auth splits there), nothing a shell or an env var mangles.
func randomToken(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating credentials: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// stageAuthenticated stages the Authenticated condition of an External
// Proxy: False while it has no spec.auth, absent otherwise.
func (c *Controller) stageAuthenticated(p *crawlv1alpha1.Proxy) {
	if p.Spec.Auth != nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, ConditionAuthenticated)
		return
	}
	c.setCondition(p, ConditionAuthenticated, metav1.ConditionFalse, ReasonNoCredentials, messageNoCredentials)
}

// refuseCredentials stages Provisioned=False/CredentialsError with err's
// message (which names the field and the Secret, never a value), and an
// event when the condition is new: nothing is sent with credentials the
// operator cannot use.
func (c *Controller) refuseCredentials(p *crawlv1alpha1.Proxy, err error) {
	if c.setProvisioned(p, metav1.ConditionFalse, ReasonCredentialsError, err.Error()) {
		c.recorder.Event(p, corev1.EventTypeWarning, ReasonCredentialsError, err.Error())
	}
}
