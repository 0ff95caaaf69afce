package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Feed keeps a Store in step with the Proxy informer: every add and update
// is an Upsert, every delete a Remove. Run it on every replica, so that a
// standby's store is warm when it starts leading.
type Feed struct {
	registration cache.ResourceEventHandlerRegistration
}

// NewFeed registers the feed's handlers on the informer. It starts nothing:
// the informer factory's Start does.
func NewFeed(store *Store, proxies crawlinformers.ProxyInformer) (*Feed, error) {
	reg, err := proxies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				store.Upsert(ProxyInfoFrom(p))
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				store.Upsert(ProxyInfoFrom(p))
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				store.Remove(cache.MetaObjectToName(p))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lease feed: %w", err)
	}
	return &Feed{registration: reg}, nil
}

// HasSynced reports whether the store has seen every Proxy of the
// informer's initial list. Start leading only after it.
func (f *Feed) HasSynced() bool { return f.registration.HasSynced() }

// ProxyInfoFrom is what the store needs of a Proxy. Ready means phase Ready
// with an address; a proxy being deleted is never Ready.
func ProxyInfoFrom(p *crawlv1alpha1.Proxy) ProxyInfo {
	url := proxyaccess.StatusURL(p)
	ready := p.Status.Phase == crawlv1alpha1.PhaseReady && url != "" && p.DeletionTimestamp == nil
	var readySince time.Time
	if ready {
		// Ready needs Provisioned=True and Healthy=True: it began at the later
		// of their transitions.
		for _, c := range p.Status.Conditions {
			if (c.Type == crawlv1alpha1.ConditionProvisioned || c.Type == crawlv1alpha1.ConditionHealthy) && c.LastTransitionTime.After(readySince) {
				readySince = c.LastTransitionTime.Time
			}
		}
	}
	return ProxyInfo{
		Key:           cache.MetaObjectToName(p),
		UID:           p.UID,
		ProviderID:    p.Status.ProviderID,
		Ready:         ready,
		URL:           url,
		Labels:        p.Labels,
		LatencyMillis: p.Status.LatencyMillis,
		MaxLeases:     p.Spec.MaxLeases,
		ReadySince:    readySince,
		Draining:      draining(p),
		// The lease API hands these out with every grant: naming the Secret
		// here spares each grant a lookup of the Proxy (docs/decisions/0160-grant-reads-proxy-credentials-secret-name.md).
		CredentialsSecret: proxyaccess.CredentialsSecret(p),
	}
}

// CredentialsFunc returns the credentials of a leased proxy, nil if it
// needs none; they are handed to the holder in the response that grants
// the lease, and nowhere else. Its errors must not contain the credentials.
type CredentialsFunc func(ctx context.Context, proxy LeasedProxy) (*proxyaccess.Credentials, error)

// errNoCredentials is wrapped by SecretCredentials' errors.
var errNoCredentials = errors.New("proxy credentials unavailable")

// SecretCredentials reads credentials from the Secret a leased proxy names
// (ProxyInfo.CredentialsSecret: spec.auth.secretRef, or the one generated
// for a Managed Proxy; keys username and password), through a lister, and
// only if it is marked for proxies (proxyaccess.ReadMarkedSecret): a grant,
// and so the gateway, never carries an unmarked Secret's password.
func SecretCredentials(secrets corelisters.SecretLister) CredentialsFunc {
	return func(_ context.Context, p LeasedProxy) (*proxyaccess.Credentials, error) {
		if p.CredentialsSecret == "" {
			// No Secret to read: skip building a getter, which allocates on
			// every grant (docs/decisions/0158-two-small-cuts-grant-one-table.md).
			return nil, nil
		}
		creds, err := proxyaccess.ReadCredentials(p.CredentialsSecret, secrets.Secrets(p.Key.Namespace).Get)
		if err != nil {
			return nil, fmt.Errorf("%w: proxy %s: %w", errNoCredentials, p.Key, err)
		}
		return creds, nil
	}
}
