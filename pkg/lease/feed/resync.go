package feed

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Resync feeds a store that has just started to decide (a replica promoted
// to lead the Raft group, pkg/lease/replica) what the informers show now:
// the store's state is its predecessor's, whose informers may have seen a
// little less. Every Proxy and CrawlPolicy of the listers is applied again;
// the store ignores what did not change. A Proxy deleted while no replica
// led stays in the store until its next event; it is granted nothing
// unless Ready, which a deleted one is not for long.
func Resync(st *store.Store, proxies crawllisters.ProxyLister, policies crawllisters.CrawlPolicyLister) error {
	ps, err := proxies.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing Proxies: %w", err)
	}
	for _, p := range ps {
		st.Upsert(ProxyInfoFrom(p))
	}
	cps, err := policies.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing CrawlPolicies: %w", err)
	}
	for _, p := range cps {
		st.SetCrawlPolicy(CrawlPolicyFrom(p))
	}
	return nil
}
