package feed

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// checked the fields; unset limits do not bind. A rule whose tiers cannot
// be applied (a selector the schema let through but labels refuses) is
// applied untiered; pkg/crawlpolicy's Valid condition names the field.
func CrawlPolicyFrom(p *crawlv1alpha1.CrawlPolicy) store.CrawlPolicy {
	out := store.CrawlPolicy{Key: store.ObjectName(cache.MetaObjectToName(p)), Rules: map[string]store.DomainLimits{}}
	addTiers := func(host string, l crawlv1alpha1.DomainLimits) {
		if t, err := TieringFrom(l, ""); t != nil && err == nil {
			if out.Tiers == nil {
				out.Tiers = map[string]*store.Tiering{}
			}
			out.Tiers[host] = t
		}
	}
	for _, r := range p.Spec.Rules {
		out.Rules[r.Host] = limitsOf(r.DomainLimits)
		addTiers(r.Host, r.DomainLimits)
	}
	if p.Spec.Default != nil {
		d := limitsOf(*p.Spec.Default)
		out.Default = &d
		addTiers(store.DefaultRuleHost, *p.Spec.Default)
	}
	return out
}

// TieringFrom is a rule's tiers as the store applies them, nil when it
// has none; the error names the first field (under field, such as
// "spec.default") that cannot be applied.
func TieringFrom(l crawlv1alpha1.DomainLimits, field string) (*store.Tiering, error) {
	if len(l.Tiers) == 0 {
		return nil, nil
	}
	t := &store.Tiering{}
	for i, pt := range l.Tiers {
		sel, err := metav1.LabelSelectorAsSelector(&pt.Selector)
		if err != nil {
			return nil, fmt.Errorf("%s.tiers[%d].selector: %w", field, i, err)
		}
		t.Names = append(t.Names, pt.Name)
		t.Selectors = append(t.Selectors, sel)
	}
	if tg := l.Tiering; tg != nil {
		if tg.Window != nil {
			t.Config.Window = tg.Window.Duration
		}
		if tg.QuietPeriod != nil {
			t.Config.QuietPeriod = tg.QuietPeriod.Duration
		}
		if tg.MinOutcomes != nil {
			t.Config.MinOutcomes = int(*tg.MinOutcomes)
		}
		var err error
		if t.Config.BanRateThreshold, err = decimal(tg.BanRateThreshold); err != nil {
			return nil, fmt.Errorf("%s.tiering.banRateThreshold: %w", field, err)
		}
		if t.Config.ProbeShare, err = decimal(tg.ProbeShare); err != nil {
			return nil, fmt.Errorf("%s.tiering.probeShare: %w", field, err)
		}
	}
	t.Config = t.Config.WithDefaults()
	if err := t.Config.Validate(field + ".tiering"); err != nil {
		return nil, err
	}
	return t, nil
}

// decimal parses an optional decimal field; "" is 0 (the default).
func decimal(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseFloat(s, 64)
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
