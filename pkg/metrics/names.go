package metrics

import (
	"regexp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// descName picks the fully-qualified name out of a Desc, whose only public
// view of it is String.
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// Names lists every metric family the registry can export, sorted: the names
// its collectors describe, whether or not they have a series yet (a labelled
// vector has none until its first observation). Histograms are listed by
// their base name; their series add _bucket, _sum and _count. The promhttp_*
// families join once Handler has been called.
//
// The install artifacts' tests check that every metric their dashboard and
// alert queries name is one of these.
func (m *Metrics) Names() []string { return namesOf(m.registry) }

// GatewayNames lists every metric family a gateway replica's registry
// (NewGateway) can export, as Names does.
func GatewayNames() []string {
	registry := prometheus.NewRegistry()
	registry.MustRegister(newGatewayMetrics(GatewayLabels{}).collectors()...) // names only
	return namesOf(registry)
}

func namesOf(registry *prometheus.Registry) []string {
	descs := make(chan *prometheus.Desc)
	go func() {
		registry.Describe(descs)
		close(descs)
	}()
	var names []string
	for d := range descs {
		if match := descName.FindStringSubmatch(d.String()); match != nil {
			names = append(names, match[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
