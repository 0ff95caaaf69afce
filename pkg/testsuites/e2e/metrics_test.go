package e2e_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// operationsDoc lists every metric the operator exports, in its Metrics table.
const operationsDoc = "../../../docs/operations.md"

// documentedMetric is one row of the doc's metrics table.
type documentedMetric struct {
	// name is a metric name, or a prefix ending in "*" for a collector
	// summarised in one row (go_*, process_*).
	name string
	// typ is counter, gauge, histogram or summary; "various" for a prefix.
	typ    string
	labels []string
}

func (m documentedMetric) prefix() (string, bool) {
	return strings.CutSuffix(m.name, "*")
}

// tableRow matches a row of the metrics table: | `name` | type | `a`, `b` | meaning |
var tableRow = regexp.MustCompile("^\\|\\s*`([a-z0-9_:*]+)`\\s*\\|\\s*([a-z]+)\\s*\\|([^|]*)\\|")

// readMetricsTable parses the table under the "## Metrics" heading of the doc.
func readMetricsTable(t *testing.T) []documentedMetric {
	t.Helper()
	f, err := os.Open(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []documentedMetric
	inSection := false
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "## ") {
			inSection = strings.TrimSpace(line) == "## Metrics"
			continue
		}
		if !inSection {
			continue
		}
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		row := documentedMetric{name: m[1], typ: m[2]}
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[3], -1) {
			row.labels = append(row.labels, l[1])
		}
		out = append(out, row)
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no metrics table under \"## Metrics\"", operationsDoc)
	}
	return out
}

// TestMetricsDocumented scrapes a running operator after the flows and
// finds every metric docs/operations.md lists, with the documented type and
// labels and a sane value, and no metric the doc does not list. A row added
// to the doc is checked at once for presence, type and labels; sane gives
// the metrics whose values the flows determine a closer look.
func TestMetricsDocumented(t *testing.T) {
	doc := readMetricsTable(t)
	s := newSuite(t)
	a := s.artifacts.forInstallation(installation{namespace: "po-metrics", suffix: "metrics"})
	r := s.startRun(t, "metrics", a, runOptions{args: []string{"-v=2"}})
	for _, res := range r.runFlows(t.Context(), nil) {
		if !res.completed() {
			t.Fatalf("flow %v", res)
		}
	}

	// Quiet: nothing queued or running and every proxy probed, so that
	// the counts can be compared.
	r.waitIdle(t)
	var got operatortest.Scraped
	eventually.Check(t, 10*time.Second, pollInterval, "proxy_operator_proxies matches the Proxies", func(ctx context.Context) error {
		var err error
		if got, err = r.op.Scrape(ctx); err != nil {
			return err
		}
		if err := r.proxiesByPhaseMatch(ctx, got); err != nil {
			return err
		}
		return noSyncRunning(got)
	})

	documented := map[string]bool{}
	for _, m := range doc {
		t.Run(m.name, func(t *testing.T) {
			if prefix, ok := m.prefix(); ok {
				n := 0
				for name := range got {
					if strings.HasPrefix(name, prefix) {
						documented[name] = true
						n++
					}
				}
				if n == 0 {
					t.Errorf("no metric named %s* in /metrics", prefix)
				}
				return
			}
			documented[m.name] = true
			family, ok := got[m.name]
			if !ok {
				t.Fatalf("%s is not in /metrics", m.name)
			}
			if typ := strings.ToLower(family.GetType().String()); typ != m.typ {
				t.Errorf("type %s, the doc says %s", typ, m.typ)
			}
			if labels := labelNames(family); !slices.Equal(labels, slices.Sorted(slices.Values(m.labels))) {
				t.Errorf("labels %q, the doc says %q", labels, m.labels)
			}
			if err := finiteAndNonNegative(family); err != nil {
				t.Error(err)
			}
			if check, ok := sane[m.name]; ok {
				if err := check(got); err != nil {
					t.Errorf("%s: %v", m.name, err)
				}
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if !documented[name] {
			f := got[name]
			t.Errorf("%s (%s, labels %q) is exported but not in the table of %s", name, strings.ToLower(f.GetType().String()), labelNames(f), operationsDoc)
		}
	}
	for name := range sane {
		if !documented[name] {
			t.Errorf("sane checks %s, which the doc does not list", name)
		}
	}
}

// sane checks the values the flows determine: one orphan collected, both
// Managed proxies created through the kubernetes provider, the refused
// creates counted as transient errors and retried, and so on.
var sane = map[string]func(operatortest.Scraped) error{
	"proxy_operator_reconcile_total": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_reconcile_total", 1,
			map[string]string{"result": "success"}, map[string]string{"result": "requeue"}, map[string]string{"result": "error"})
	},
	"proxy_operator_reconcile_duration_seconds": func(s operatortest.Scraped) error {
		for _, result := range []string{"success", "requeue", "error"} {
			n, _ := s.Value("proxy_operator_reconcile_total", map[string]string{"result": result})
			observed, _ := s.Value("proxy_operator_reconcile_duration_seconds", map[string]string{"result": result})
			if n != observed {
				return fmt.Errorf("%v %s durations for %v syncs", observed, result, n)
			}
		}
		return nil
	},
	"proxy_operator_provider_calls_total": func(s operatortest.Scraped) error {
		k := func(op string) map[string]string { return map[string]string{"provider": "kubernetes", "op": op} }
		// create: both Managed proxies, and the refused retries.
		if err := atLeast(s, "proxy_operator_provider_calls_total", 2, k("create")); err != nil {
			return err
		}
		if err := atLeast(s, "proxy_operator_provider_calls_total", 1, k("get"), k("delete")); err != nil {
			return err
		}
		// Orphan collection lists every round and deleted the orphan Pod.
		if err := atLeast(s, "proxy_operator_provider_calls_total", 1, k("list")); err != nil {
			return err
		}
		return nil
	},
	"proxy_operator_provider_errors_total": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_provider_errors_total", 1,
			map[string]string{"provider": "kubernetes", "op": "create", "class": "transient"})
	},
	"proxy_operator_gc_collected_total": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_gc_collected_total", map[string]string{"provider": "kubernetes", "reason": gc.CollectedOrphaned}, 1)
	},
	"proxy_operator_leader": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_leader", nil, 1)
	},
	"proxy_operator_build_info": func(s operatortest.Scraped) error {
		for _, m := range s["proxy_operator_build_info"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "version" && l.GetValue() != "" && m.GetGauge().GetValue() == 1 {
					return nil
				}
			}
		}
		return errors.New("no series with a version and the value 1")
	},
	"proxy_operator_proxies": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_proxies", 1, map[string]string{"phase": "Ready"}) // the External and the retried proxy
	},
	"proxy_operator_probe_duration_seconds": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_probe_duration_seconds", 2, map[string]string{"result": "success"})
	},
	"proxy_operator_probe_last_timestamp_seconds": func(s operatortest.Scraped) error {
		v, ok := s.Value("proxy_operator_probe_last_timestamp_seconds", map[string]string{"name": externalProxy})
		if age := time.Since(time.Unix(int64(v), 0)); !ok || age > time.Minute || age < -time.Minute {
			return fmt.Errorf("the External proxy was last probed at %v (present %v)", v, ok)
		}
		return nil
	},
	"proxy_operator_probe_consecutive_failures": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_probe_consecutive_failures", map[string]string{"name": externalProxy}, 0)
	},
	"proxy_operator_proxies_by_verdict": func(s operatortest.Scraped) error {
		if err := atLeast(s, "proxy_operator_proxies_by_verdict", 2, map[string]string{"verdict": "healthy"}); err != nil {
			return err
		}
		return exactly(s, "proxy_operator_proxies_by_verdict", map[string]string{"verdict": "unhealthy"}, 0)
	},
	"proxy_operator_probe_schedule_delay_seconds": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_probe_schedule_delay_seconds", 2, nil)
	},
	"proxy_operator_probe_dispatch_skipped_total": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_probe_dispatch_skipped_total", nil, 0) // 512 workers, 3 proxies
	},
	"promhttp_metric_handler_errors_total": func(s operatortest.Scraped) error {
		for _, m := range s["promhttp_metric_handler_errors_total"].GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				return fmt.Errorf("series %v = %v", m.GetLabel(), v)
			}
		}
		return nil
	},
	"proxy_operator_lease_acquires_total": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_lease_acquires_total", 1, map[string]string{"outcome": "granted"}) // the managed flow's lease
	},
	"proxy_operator_leases_active": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_leases_active", nil, 0) // released
	},
	"proxy_operator_lease_duration_seconds": func(s operatortest.Scraped) error {
		return atLeast(s, "proxy_operator_lease_duration_seconds", 1, map[string]string{"end": "released_ok"})
	},
	"proxy_operator_lease_cooldowns": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_lease_cooldowns", nil, 0) // no ban
	},
	"proxy_operator_lease_recovering": func(s operatortest.Scraped) error {
		return exactly(s, "proxy_operator_lease_recovering", nil, 0) // the first leader has nobody to wait for
	},
	"workqueue_adds_total": func(s operatortest.Scraped) error {
		return atLeast(s, "workqueue_adds_total", 3, map[string]string{"name": "proxies"}) // three Proxies
	},
	"workqueue_depth": func(s operatortest.Scraped) error {
		return exactly(s, "workqueue_depth", map[string]string{"name": "proxies"}, 0) // idle
	},
	"workqueue_unfinished_work_seconds": func(s operatortest.Scraped) error {
		return exactly(s, "workqueue_unfinished_work_seconds", map[string]string{"name": "proxies"}, 0) // idle
	},
	"workqueue_work_duration_seconds": func(s operatortest.Scraped) error {
		syncs, _ := s.Value("proxy_operator_reconcile_total", nil)
		return exactly(s, "workqueue_work_duration_seconds", map[string]string{"name": "proxies"}, syncs)
	},
	"workqueue_retries_total": func(s operatortest.Scraped) error {
		return atLeast(s, "workqueue_retries_total", 1, map[string]string{"name": "proxies"}) // the refused creates
	},
	"workqueue_queue_duration_seconds": func(s operatortest.Scraped) error {
		// Every item taken off the queue waited there first.
		processed, _ := s.Value("workqueue_work_duration_seconds", map[string]string{"name": "proxies"})
		return exactly(s, "workqueue_queue_duration_seconds", map[string]string{"name": "proxies"}, processed)
	},
	"workqueue_longest_running_processor_seconds": func(s operatortest.Scraped) error {
		return exactly(s, "workqueue_longest_running_processor_seconds", map[string]string{"name": "proxies"}, 0) // idle
	},
	"promhttp_metric_handler_requests_in_flight": func(s operatortest.Scraped) error {
		return exactly(s, "promhttp_metric_handler_requests_in_flight", nil, 1) // this scrape
	},
	"promhttp_metric_handler_requests_total": func(s operatortest.Scraped) error {
		return atLeast(s, "promhttp_metric_handler_requests_total", 1, map[string]string{"code": "200"}) // earlier scrapes
	},
}

// proxiesByPhaseMatch compares proxy_operator_proxies{namespace} with the
// Proxies of the run's namespace, counted by phase as the metric counts them.
func (r *operatorRun) proxiesByPhaseMatch(ctx context.Context, s operatortest.Scraped) error {
	list, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := map[string]float64{}
	for _, p := range list.Items {
		phase := p.Status.Phase
		if phase == "" {
			phase = crawlv1alpha1.PhasePending
		}
		want[string(phase)]++
	}
	got := map[string]float64{}
	for _, m := range s["proxy_operator_proxies"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] == r.proxies && m.GetGauge().GetValue() != 0 {
			got[labels["phase"]] = m.GetGauge().GetValue()
		}
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("proxy_operator_proxies by phase %v, the Proxies' phases %v", got, want)
	}
	return nil
}

func atLeast(s operatortest.Scraped, name string, min float64, series ...map[string]string) error {
	for _, labels := range series {
		v, ok := s.Value(name, labels)
		if !ok || v < min {
			return fmt.Errorf("%s%v = %v (present %v), want at least %v", name, labels, v, ok, min)
		}
	}
	return nil
}

// noSyncRunning: no item is between the queue's Get and Done in s. A sync
// can start after waitIdle (a requeue's timer, a late verdict), and a
// scrape taken during it counts it as taken off the queue but not yet
// worked, which the exact counts below would read as a bug; a queue that
// never balances still fails, when the wait runs out.
func noSyncRunning(s operatortest.Scraped) error {
	queue := map[string]string{"name": "proxies"}
	taken, _ := s.Value("workqueue_queue_duration_seconds", queue)
	worked, _ := s.Value("workqueue_work_duration_seconds", queue)
	if taken != worked {
		return fmt.Errorf("a sync is running: %v items taken off the queue, %v worked", taken, worked)
	}
	return nil
}

func exactly(s operatortest.Scraped, name string, labels map[string]string, want float64) error {
	v, ok := s.Value(name, labels)
	if !ok || v != want {
		return fmt.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
	}
	return nil
}

// labelNames are the sorted label names of a family's series (a
// histogram's le and a summary's quantile are not labels of the series).
func labelNames(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// finiteAndNonNegative checks every sample of a counter or histogram for a
// value that is a number and not negative, and every gauge for a number.
func finiteAndNonNegative(f *dto.MetricFamily) error {
	for _, m := range f.GetMetric() {
		var values []float64
		nonNegative := true
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			values = []float64{m.GetCounter().GetValue()}
		case dto.MetricType_GAUGE:
			values, nonNegative = []float64{m.GetGauge().GetValue()}, false
		case dto.MetricType_HISTOGRAM:
			values = []float64{m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())}
		case dto.MetricType_SUMMARY:
			values = []float64{m.GetSummary().GetSampleSum(), float64(m.GetSummary().GetSampleCount())}
		}
		for _, v := range values {
			if math.IsNaN(v) || math.IsInf(v, 0) || nonNegative && v < 0 {
				return fmt.Errorf("%s: series %v has the value %v", f.GetName(), m.GetLabel(), v)
			}
		}
	}
	return nil
}
