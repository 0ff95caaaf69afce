package artifacts_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

const (
	dashboardFile = "dashboards/proxy-operator-fleet.json"
	rulesFile     = "alerts/proxy-operator.rules.yaml"
)

// exported is every metric name the operator's registry can export, with the
// series names of histograms.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	// Names only: no label value adds or removes a family.
	m := metrics.New(metrics.Labels{})
	m.Handler() // registers the promhttp_* families
	names := map[string]bool{}
	for _, n := range m.Names() {
		names[n] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[n+suffix] = true
		}
	}
	return names
}

// checkQueries fails for a query that names no metric, or one the operator
// does not export. Not every exported metric needs a query: other metrics
// come and go without touching the dashboard.
func checkQueries(t *testing.T, where string, queries map[string]string) {
	t.Helper()
	if len(queries) == 0 {
		t.Fatalf("%s: no queries found", where)
	}
	names := exported(t)
	for at, q := range queries {
		used := metricNames(q)
		if len(used) == 0 {
			t.Errorf("%s %s: %q names no metric", where, at, q)
		}
		for _, n := range used {
			if !names[n] {
				t.Errorf("%s %s: %q names %s, which pkg/metrics does not export", where, at, q, n)
			}
		}
	}
}

// Every query of the Grafana dashboard (panel targets and query variables)
// names metrics the operator exports.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("%s: want a title and a uid", dashboardFile)
	}
	queries := map[string]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("%s: panel %q target %s has no expr", dashboardFile, p.Title, tg.RefID)
			}
			queries["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q.Query); err != nil { // a plain string, or {"query": ...}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("%s: variable %s: %v", dashboardFile, v.Name, err)
			}
		}
		queries["variable "+v.Name] = q.Query
	}
	// The panels the fleet view needs, by the metric that feeds them.
	for _, want := range []string{
		"proxy_operator_proxies",                       // Ready by namespace
		"proxy_operator_probe_duration_seconds_bucket", // probe latency
		"proxy_operator_leases_active",                 // leases held
		"proxy_operator_lease_acquires_total",          // waiting and refused
		"proxy_operator_provider_errors_total",         // provider errors
		"workqueue_depth",                              // queue depth
	} {
		if !slices.ContainsFunc(mapValues(queries), func(q string) bool { return slices.Contains(metricNames(q), want) }) {
			t.Errorf("%s: no query shows %s", dashboardFile, want)
		}
	}
	checkQueries(t, dashboardFile, queries)
}

// ruleGroups is the body of a Prometheus rules file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T, path string) ruleGroups {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rg ruleGroups
	if err := yaml.UnmarshalStrict(raw, &rg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rg
}

// Every alert expression names metrics the operator exports, and carries a
// severity and a summary.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	rg := readRules(t, rulesFile)
	queries := map[string]string{}
	for _, g := range rg.Groups {
		for _, r := range g.Rules {
			queries[g.Name+"/"+r.Alert] = r.Expr
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: alert %s wants labels.severity and annotations.summary", rulesFile, r.Alert)
			}
		}
	}
	checkQueries(t, rulesFile, queries)
}

// The PrometheusRule and the chart's copy hold exactly the plain rules file's groups.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	want := readRules(t, rulesFile)
	raw, err := os.ReadFile("alerts/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Metadata   any        `json:"metadata"`
		Spec       ruleGroups `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &pr); err != nil {
		t.Fatalf("alerts/prometheusrule.yaml: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("alerts/prometheusrule.yaml is %s %s, want monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	if diff := diffJSON(want, pr.Spec); diff != "" {
		t.Errorf("alerts/prometheusrule.yaml spec differs from %s (-rules file +PrometheusRule):\n%s", rulesFile, diff)
	}
	if diff := diffJSON(want, readRules(t, filepath.Join(chartDir, "files", "proxy-operator.rules.yaml"))); diff != "" {
		t.Errorf("the chart's files/proxy-operator.rules.yaml differs from %s: copy it over:\n%s", rulesFile, diff)
	}
}

// promtool's own unit tests of the rules on synthetic series, and its check.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool := tool(t, "promtool")
	track(t, "alerts")
	run(t, nil, promtool, "check", "rules", rulesFile)
	out := run(t, nil, promtool, "test", "rules", "alerts/proxy-operator.rules.test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules did not report SUCCESS:\n%s", out)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
