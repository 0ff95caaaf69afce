package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/controller"
)

// lateProbe is the schedule delay above which a probe counts as late: a
// bucket bound of proxy_operator_probe_schedule_delay_seconds (0.01·2^k),
// well above the scheduler's tick.
const lateProbe = 1.28

// healthCounts say what the health engine did, read from the operator's
// /metrics and the namespace's events: the answer to "are the Unhealthy
// events of a steady fleet real probe failures, or a probe pool that does
// not keep up?".
type healthCounts struct {
	// probes by result (proxy_operator_probe_duration_seconds_count).
	probes counts
	// scheduled probes, and those that started more than lateProbe late.
	scheduled, late float64
	// skipped dispatches: every probe worker was busy.
	skipped float64
	// reports: verdicts reported to the controller, by why
	// (proxy_operator_health_reports_total).
	reports counts
	// events by reason (Event.count summed), and the Unhealthy events'
	// messages with their numbers masked.
	events, unhealthyMessages counts
}

// scrapeHealth reads the operator's probe counters and the events in ns.
func scrapeHealth(ctx context.Context, metricsURL string, kube kubernetes.Interface, ns string) (healthCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL+"/metrics", nil)
	if err != nil {
		return healthCounts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return healthCounts{}, fmt.Errorf("scraping the operator's /metrics: %w", err)
	}
	defer resp.Body.Close()
	h, err := parseProbeMetrics(resp.Body)
	if err != nil {
		return h, err
	}
	events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return h, fmt.Errorf("listing the events of %s: %w", ns, err)
	}
	h.events, h.unhealthyMessages = counts{}, counts{}
	for _, e := range events.Items {
		n := float64(max(e.Count, 1))
		h.events[e.Reason] += n
		if e.Reason == controller.ReasonUnhealthy {
			h.unhealthyMessages[maskNumbers(e.Message)] += n
		}
	}
	return h, nil
}

// parseProbeMetrics reads the health engine's counters from the operator's
// /metrics text.
func parseProbeMetrics(r io.Reader) (healthCounts, error) {
	h := healthCounts{probes: counts{}, reports: counts{}}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return h, fmt.Errorf("parsing the operator's /metrics: %w", err)
	}
	for _, m := range families["proxy_operator_probe_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" {
				h.probes[l.GetValue()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for _, m := range families["proxy_operator_probe_schedule_delay_seconds"].GetMetric() {
		hist := m.GetHistogram()
		h.scheduled += float64(hist.GetSampleCount())
		onTime := math.NaN()
		for _, b := range hist.GetBucket() {
			if math.Abs(b.GetUpperBound()-lateProbe) < 1e-9 {
				onTime = float64(b.GetCumulativeCount())
			}
		}
		if math.IsNaN(onTime) {
			return h, fmt.Errorf("proxy_operator_probe_schedule_delay_seconds has no bucket at %vs", lateProbe)
		}
		h.late += float64(hist.GetSampleCount()) - onTime
	}
	for _, m := range families["proxy_operator_probe_dispatch_skipped_total"].GetMetric() {
		h.skipped += m.GetCounter().GetValue()
	}
	for _, m := range families["proxy_operator_health_reports_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				h.reports[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return h, nil
}

// sub returns h − before.
func (h healthCounts) sub(before healthCounts) healthCounts {
	return healthCounts{
		probes:            h.probes.sub(before.probes),
		scheduled:         h.scheduled - before.scheduled,
		late:              h.late - before.late,
		skipped:           h.skipped - before.skipped,
		reports:           h.reports.sub(before.reports),
		events:            h.events.sub(before.events),
		unhealthyMessages: h.unhealthyMessages.sub(before.unhealthyMessages),
	}
}

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// maskNumbers groups messages that differ only in figures ("timed out
// after 5s", "answered 204 in 3ms").
func maskNumbers(s string) string { return digits.ReplaceAllString(s, "N") }

// topMessages formats the n most frequent messages with their counts per
// minute.
func topMessages(c counts, n int, minutes float64) string {
	var parts []string
	for _, k := range c.largestFirst()[:min(n, len(c))] {
		parts = append(parts, fmt.Sprintf("%q %.1f", k, c[k]/minutes))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
