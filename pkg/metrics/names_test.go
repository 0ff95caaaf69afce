package metrics

import (
	"slices"
	"testing"
)

// Names lists families without series too (a vector never observed), and
// every family a scrape shows.
func TestNames(t *testing.T) {
	m := New(testLabels)
	m.Handler()
	names := m.Names()
	for _, want := range []string{
		"proxy_operator_provider_errors_total",  // a vector with no series yet
		"proxy_operator_probe_duration_seconds", // a histogram, by its base name
		"workqueue_depth",
		"promhttp_metric_handler_requests_total",
		"go_goroutines",
		"process_start_time_seconds",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %q", want)
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("Names() is not sorted and unique: %q", names)
	}
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			t.Errorf("scraped family %q is not in Names()", f.GetName())
		}
	}
}
