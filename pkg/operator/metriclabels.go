package operator

import (
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// metricLabels are the label values the operator's metrics predeclare, each
// listed by the package that reports it: pkg/metrics imports none of the
// packages it measures (docs/decisions/0251-dependencies-point-down.md).
func metricLabels() metrics.Labels {
	return metrics.Labels{
		ProbeResults:    health.Results,
		HealthReports:   health.Reports,
		AcquireOutcomes: store.AcquireOutcomes,
		LeaseEnds:       store.LeaseEnds,
		LeaseStateKinds: store.StateKinds,

		LeasePushResults: push.Results,
	}
}
