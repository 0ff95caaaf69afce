package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"

	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// The counters are read from what the operator's own registry serves, so a
// renamed metric or bucket breaks this test, not the bench at hour two.
func TestParseProbeMetrics(t *testing.T) {
	m := metrics.New(metrics.Labels{ProbeResults: health.Results, HealthReports: health.Reports})
	key := cache.ObjectName{Namespace: "ns", Name: "px"}
	for range 5 {
		m.ObserveProbe(key, health.ResultSuccess, 3*time.Millisecond, time.Now())
	}
	m.ObserveProbe(key, health.ResultTimeout, 5*time.Second, time.Now())
	m.ObserveProbe(key, health.ResultTimeout, 5*time.Second, time.Now())
	m.ObserveProbe(key, health.ResultConnectError, time.Millisecond, time.Now())
	for _, d := range []time.Duration{10 * time.Millisecond, time.Second, 1280 * time.Millisecond, 1300 * time.Millisecond, 3 * time.Second} {
		m.ObserveScheduleDelay(d)
	}
	m.ProbeDispatchSkipped()
	m.ObserveReport("latency_change")
	m.ObserveReport("latency_change")
	m.ObserveReport("flip")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got, err := parseProbeMetrics(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := healthCounts{
		probes:    counts{health.ResultSuccess: 5, health.ResultTimeout: 2, health.ResultConnectError: 1},
		scheduled: 5,
		late:      2, // 1.3 s and 3 s; 1.28 s is on the bucket bound, so on time
		skipped:   1,
		reports:   counts{"latency_change": 2, "flip": 1},
	}
	got.probes = got.probes.sub(counts{}) // the pre-declared zero series
	got.reports = got.reports.sub(counts{})
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(healthCounts{})); diff != "" {
		t.Errorf("parseProbeMetrics (-want +got):\n%s", diff)
	}
}

func TestMaskNumbers(t *testing.T) {
	tests := map[string]string{
		"Probe failed: timed out after 5s":                  "Probe failed: timed out after Ns",
		"Probe failed: target answered 503 in 1.2s":         "Probe failed: target answered N in Ns",
		"Probe failed: connect to 127.0.0.1:31280: refused": "Probe failed: connect to N.N:N: refused",
		"no figures": "no figures",
	}
	got := map[string]string{}
	for in := range tests {
		got[in] = maskNumbers(in)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("maskNumbers (-want +got):\n%s", diff)
	}
}

func TestTopMessages(t *testing.T) {
	c := counts{"a": 2, "b": 6, "c": 4, "d": 4}
	if got, want := topMessages(c, 3, 2), `"b" 3.0; "c" 2.0; "d" 2.0`; got != want {
		t.Errorf("topMessages = %s, want %s", got, want)
	}
	if got := topMessages(counts{}, 3, 1); got != "none" {
		t.Errorf("topMessages of nothing = %s, want none", got)
	}
}

func TestParseGauge(t *testing.T) {
	text := "# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 1.2345e+07\n"
	got, err := parseGauge(strings.NewReader(text), "go_memstats_heap_inuse_bytes")
	if err != nil || got != 1.2345e+07 {
		t.Errorf("parseGauge = %v, %v; want 1.2345e+07", got, err)
	}
	if _, err := parseGauge(strings.NewReader(text), "absent"); err == nil {
		t.Error("parseGauge of a missing gauge: no error")
	}
}
