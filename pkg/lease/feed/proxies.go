package feed

import (
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Proxies keeps st in step with the Proxy informer: every add and update
// is an Upsert, every delete a Remove. It registers its handlers and
// starts nothing (the informer factory's Start does); it returns whether
// st has seen every Proxy of the informer's initial list: start leading
// only after it. Run it on every replica, so that a standby's store is
// warm when it starts leading.
func Proxies(st *store.Store, proxies crawlinformers.ProxyInformer) (cache.InformerSynced, error) {
	reg, err := proxies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				st.Upsert(ProxyInfoFrom(p))
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				st.Upsert(ProxyInfoFrom(p))
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				st.Remove(store.ObjectName(cache.MetaObjectToName(p)))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lease feed of proxies: %w", err)
	}
	return reg.HasSynced, nil
}

// ProxyInfoFrom is what the store needs of a Proxy. Ready means phase Ready
// with an address; a proxy being deleted, or a pool's shared instance, is
// never Ready.
func ProxyInfoFrom(p *crawlv1alpha1.Proxy) store.ProxyInfo {
	url := proxyaccess.StatusURL(p)
	ready := p.Status.Phase == crawlv1alpha1.PhaseReady && url != "" && p.DeletionTimestamp == nil
	// A pool's shared instance is leased through its members, each a
	// session of it, never directly (spec.membersPerInstance).
	if p.Labels[crawlv1alpha1.PoolInstanceLabel] != "" {
		ready = false
	}
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
	return store.ProxyInfo{
		Key:           store.ObjectName(cache.MetaObjectToName(p)),
		UID:           p.UID,
		ProviderID:    p.Status.ProviderID,
		Ready:         ready,
		URL:           url,
		Labels:        p.Labels,
		Pool:          p.Labels[crawlv1alpha1.PoolLabel],
		LatencyMillis: p.Status.LatencyMillis,
		MaxLeases:     p.Spec.MaxLeases,
		ReadySince:    readySince,
		Draining:      draining(p),
		// The lease API hands these out with every grant: naming the Secret
		// here spares each grant a lookup of the Proxy (docs/decisions/0160-grant-reads-proxy-credentials-secret-name.md).
		CredentialsSecret: proxyaccess.CredentialsSecret(p),
		ExitCountry:       exitCountry(p),
	}
}

// exitCountry is the country the proxy is measured to leave from
// (status.exitCountry), else the one its crawl.proxyfleet.io/exit-country
// label declares: an External proxy nobody probes for its country can be
// labelled by hand. Anything but an upper-case two-letter code is none.
func exitCountry(p *crawlv1alpha1.Proxy) string {
	c := p.Status.ExitCountry
	if c == "" {
		c = p.Labels[crawlv1alpha1.ExitCountryLabel]
	}
	if !wire.IsCountryCode(c) {
		return ""
	}
	return c
}

// draining says whether a ProxyPool is taking the proxy out (the pool sets
// the annotation): the store then grants no new lease on it, and its live
// leases keep renewing, so that a crawler is not cut off mid-job.
func draining(p *crawlv1alpha1.Proxy) bool {
	_, ok := p.Annotations[crawlv1alpha1.DrainingAnnotation]
	return ok
}
