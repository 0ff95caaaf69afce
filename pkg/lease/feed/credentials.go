package feed

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Proxy credentials for the lease API's grants and renewals, read through
// the Proxy and Secret informers' listers.

// errNoCredentials is wrapped by LeaseCredentials' errors.
var errNoCredentials = errors.New("proxy credentials unavailable")

// LeaseCredentials signs a lease's credentials with its instance's key
// (pkg/leasecred) when the instance checks them (the Proxy's LeaseBound
// condition), so that they admit only while the lease lives; for any other
// proxy they are the proxy's own (an advisory lease). Create it with
// NewLeaseCredentials; For is the lease server's Credentials, Target the
// pusher's Resolver.
type LeaseCredentials struct {
	proxies crawllisters.ProxyLister
	secrets corelisters.SecretLister
	keys    leasecred.KeyCache
	signed  func(store.Lease, push.Target)
}

// NewLeaseCredentials reads Proxies and Secrets through listers; signed,
// if set, is told of every lease it signs for and the instance's target
// (push.Pusher.Signed).
func NewLeaseCredentials(proxies crawllisters.ProxyLister, secrets corelisters.SecretLister, signed func(store.Lease, push.Target)) *LeaseCredentials {
	return &LeaseCredentials{proxies: proxies, secrets: secrets, signed: signed}
}

// For returns the credentials of lease l's proxy (server.CredentialsFunc):
// nil when it takes none (an External proxy without spec.auth); a session's
// username with its session term, so that its signature binds the exit.
// The Secret is read only when marked for proxies
// (proxyaccess.ReadMarkedSecret), so a grant, and so the gateway, never
// carries an unmarked Secret's password. A gateway-only proxy's are only
// for the gateway tier (auth.ErrGatewayOnly otherwise). Its errors name
// the proxy and the Secret, never a credential.
func (c *LeaseCredentials) For(ctx context.Context, l store.Lease) (*proxyaccess.Credentials, error) {
	p, err := c.proxy(l.Proxy.Key, l.Proxy.UID)
	if err != nil {
		return nil, err
	}
	if p.Labels[crawlv1alpha1.GatewayOnlyLabel] == "true" && !auth.ActingFor(ctx) {
		return nil, auth.ErrGatewayOnly
	}
	creds, err := proxyaccess.ReadProxyCredentials(p, c.secrets.Secrets(p.Namespace).Get)
	if err != nil {
		return nil, fmt.Errorf("%w: proxy %s: %w", errNoCredentials, l.Proxy.Key, err)
	}
	if creds == nil {
		return nil, nil
	}
	keys, err := c.leaseKeys(p, creds)
	if err != nil || keys == nil {
		creds.LeaseKeys = "" // the instance's, never the holder's
		return creds, err
	}
	signed := &proxyaccess.Credentials{
		Username:   creds.Username,
		Password:   leasecred.Sign(keys[0], creds.Username, leasecred.Claims{Ref: push.Ref(l.Ref), End: l.ExpiresAt}),
		LeaseBound: true,
	}
	if c.signed != nil {
		addr, _ := proxyaccess.StatusAddress(p)
		c.signed(l, push.Target{Addr: addr, Keys: keys})
	}
	return signed, nil
}

// Target is where the instance of the proxy key (with uid) listens and its
// lease keys (push.Resolver): false unless it checks lease credentials.
func (c *LeaseCredentials) Target(key store.ObjectName, uid types.UID) (push.Target, bool) {
	p, err := c.proxy(key, uid)
	if err != nil {
		return push.Target{}, false
	}
	creds, err := proxyaccess.ReadProxyCredentials(p, c.secrets.Secrets(p.Namespace).Get)
	if err != nil || creds == nil {
		return push.Target{}, false
	}
	keys, err := c.leaseKeys(p, creds)
	addr, ok := proxyaccess.StatusAddress(p)
	if err != nil || keys == nil || !ok {
		return push.Target{}, false
	}
	return push.Target{Addr: addr, Keys: keys}, true
}

func (c *LeaseCredentials) proxy(key store.ObjectName, uid types.UID) (*crawlv1alpha1.Proxy, error) {
	p, err := c.proxies.Proxies(key.Namespace).Get(key.Name)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && uid != "" && p.UID != uid):
		return nil, fmt.Errorf("%w: proxy %s is gone", errNoCredentials, key)
	case err != nil:
		return nil, fmt.Errorf("%w: proxy %s: %w", errNoCredentials, key, err)
	}
	return p, nil
}

// leaseKeys are the keys to sign p's leases with: nil unless its instance
// checks them (LeaseBound) and its Secret holds them.
func (c *LeaseCredentials) leaseKeys(p *crawlv1alpha1.Proxy, creds *proxyaccess.Credentials) ([]leasecred.Key, error) {
	if creds.LeaseKeys == "" || !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionLeaseBound) {
		return nil, nil
	}
	keys, err := c.keys.Parse(creds.LeaseKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: proxy %s: credentials Secret %q key %q: %w", errNoCredentials, p.Namespace+"/"+p.Name, proxyaccess.CredentialsSecret(p), leasecred.SecretKey, err)
	}
	return keys, nil
}
