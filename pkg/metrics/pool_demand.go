package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// PoolDemandKinds are the values of proxy_operator_pool_lease_demand's kind label.
var PoolDemandKinds = []string{"held", "waiting", "refused"}

// poolDemandMetrics are a pool's lease demand as its autoscaler measures
// it, for every pool, so that an HPA or KEDA can scale on the same figures.
type poolDemandMetrics struct {
	demand *prometheus.GaugeVec
}

func newPoolDemandMetrics() poolDemandMetrics {
	return poolDemandMetrics{
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_lease_demand",
			Help:      "Lease demand on a ProxyPool by kind: held (slots held on its members), waiting (acquires waiting that a member would serve), refused (distinct holders refused for lack of a free member within the last minute).",
		}, []string{"namespace", "pool", "kind"}),
	}
}

func (p poolDemandMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.demand}
}

// SetPoolDemand records a pool's demand (pkg/pool, every sync while the
// lease store leads).
func (m *Metrics) SetPoolDemand(ns, pool string, held, waiting, refused int) {
	m.poolDemand.demand.WithLabelValues(ns, pool, "held").Set(float64(held))
	m.poolDemand.demand.WithLabelValues(ns, pool, "waiting").Set(float64(waiting))
	m.poolDemand.demand.WithLabelValues(ns, pool, "refused").Set(float64(refused))
}

func (p poolDemandMetrics) forget(ns, pool string) {
	p.demand.DeletePartialMatch(prometheus.Labels{"namespace": ns, "pool": pool})
}
