package operator

import (
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	crawlinformersv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"github.com/proxyfleet/proxy-operator/pkg/pool"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// newPoolController builds the ProxyPool controller (pkg/pool): it runs on
// the leader beside the Proxy controller, with its own queue, and asks the
// lease store how many leases hold each draining member, what each
// member's instance has been through (spec.recycle) and, for
// spec.autoscaling, which acquires wait or were refused.
func newPoolController(crawl versioned.Interface, kube kubernetes.Interface, factory crawlinformers.SharedInformerFactory,
	proxies crawlinformersv1alpha1.ProxyInformer, secrets coreinformers.SecretInformer, leases *server.Server, providers provider.Set, m *metrics.Metrics) (*pool.Controller, error) {
	return pool.NewController(pool.Config{
		CrawlClient:      crawl,
		KubeClient:       kube,
		PoolInformer:     factory.Crawl().V1alpha1().ProxyPools(),
		ProxyInformer:    proxies,
		SecretInformer:   secrets,
		Leases:           pool.StoreLeases{Store: leases.Store()},
		Burn:             leases.Store(),
		Outcomes:         leases.Store(), // status.usage
		Demand:           leases.Store(), // spec.autoscaling: waiting and refused acquires
		Providers:        providers,      // a provider's age limit for its instances
		Metrics:          m,
		WorkqueueMetrics: m.WorkqueueProvider(),
	})
}
