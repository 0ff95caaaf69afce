package feed

import (
	"fmt"

	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// CrawlPolicies applies every CrawlPolicy of the informer to st (the store
// enforces its budgets at grant time, docs/politeness.md), then calls
// changed (nil: nothing; the status writer's Poke). It registers its
// handlers and starts nothing; it returns whether the initial list has
// been applied.
func CrawlPolicies(st *store.Store, policies crawlinformers.CrawlPolicyInformer, changed func()) (cache.InformerSynced, error) {
	apply := func(obj any) {
		if p, ok := obj.(*crawlv1alpha1.CrawlPolicy); ok {
			st.SetCrawlPolicy(CrawlPolicyFrom(p))
			if changed != nil {
				changed()
			}
		}
	}
	reg, err := policies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.CrawlPolicy); ok {
				st.DeleteCrawlPolicy(store.ObjectName(cache.MetaObjectToName(p)))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lease feed of crawl policies: %w", err)
	}
	return reg.HasSynced, nil
}

// CrawlPolicyFrom is a policy as the store applies it. The schema has
// checked the fields; unset limits do not bind.
func CrawlPolicyFrom(p *crawlv1alpha1.CrawlPolicy) store.CrawlPolicy {
	out := store.CrawlPolicy{Key: store.ObjectName(cache.MetaObjectToName(p)), Rules: map[string]store.DomainLimits{}}
	for _, r := range p.Spec.Rules {
		out.Rules[r.Host] = limitsOf(r.DomainLimits)
	}
	if p.Spec.Default != nil {
		d := limitsOf(*p.Spec.Default)
		out.Default = &d
	}
	return out
}

func limitsOf(l crawlv1alpha1.DomainLimits) store.DomainLimits {
	var out store.DomainLimits
	if l.MaxConcurrent != nil {
		out.MaxConcurrent = int(*l.MaxConcurrent)
	}
	if l.MinInterval != nil {
		out.MinInterval = l.MinInterval.Duration
	}
	if l.MinIntervalPerProxy != nil {
		out.MinIntervalPerProxy = l.MinIntervalPerProxy.Duration
	}
	return out
}
