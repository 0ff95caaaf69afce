// Package crawlpolicy connects CrawlPolicy objects to the lease store: a
// feed that applies every policy to the store (on every replica, so that
// a standby's store is warm), and a status writer on the leader that shows
// each rule's budget in use and how often callers waited or were refused
// (docs/politeness.md). The budgets themselves live in pkg/lease.
package crawlpolicy

import (
	"fmt"

	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

// Store is what the feed and the status writer need of the lease store.
type Store interface {
	SetCrawlPolicy(lease.CrawlPolicy)
	DeleteCrawlPolicy(cache.ObjectName)
	CrawlPolicyStats(cache.ObjectName) []lease.RuleStats
}

// NewFeed registers handlers that apply every CrawlPolicy of the informer
// to store, then call changed (nil: nothing; the status writer's Poke);
// it returns whether the initial list has been applied.
func NewFeed(store Store, policies crawlinformers.CrawlPolicyInformer, changed func()) (cache.InformerSynced, error) {
	apply := func(obj any) {
		if p, ok := obj.(*crawlv1alpha1.CrawlPolicy); ok {
			store.SetCrawlPolicy(Resolve(p))
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
				store.DeleteCrawlPolicy(cache.MetaObjectToName(p))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("crawl policy feed: %w", err)
	}
	return reg.HasSynced, nil
}

// Resolve is a policy as the store applies it. The schema has checked the
// fields; unset limits do not bind.
func Resolve(p *crawlv1alpha1.CrawlPolicy) lease.CrawlPolicy {
	out := lease.CrawlPolicy{Key: cache.MetaObjectToName(p), Rules: map[string]lease.DomainLimits{}}
	for _, r := range p.Spec.Rules {
		out.Rules[r.Host] = limitsOf(r.DomainLimits)
	}
	if p.Spec.Default != nil {
		d := limitsOf(*p.Spec.Default)
		out.Default = &d
	}
	return out
}

func limitsOf(l crawlv1alpha1.DomainLimits) lease.DomainLimits {
	var out lease.DomainLimits
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
