package artifacts_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// promqlKeywords are identifiers of PromQL that are no metric names though
// not followed by "(": operators, and aggregations written "max by (l) (...)".
// Functions and aggregations followed by "(" are skipped as such.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "count": true,
	"stddev": true, "stdvar": true, "count_values": true, "topk": true, "bottomk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

// labelListKeywords are followed by a parenthesized list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

var (
	stringLiteral = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	braces        = regexp.MustCompile(`\{[^}]*\}`)
	brackets      = regexp.MustCompile(`\[[^\]]*\]`)
	// A number or duration (0.99, 2e3, 5m) is one token, so its letters are no name.
	token = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// Grafana's label_values(<PromQL>, <label>) variable query.
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
)

// metricNames returns the metric names a PromQL expression selects, in order
// of appearance: a small lexer, enough for the queries written here (strings,
// label matchers, ranges and label lists are dropped; what is left and not a
// function, an aggregation or a keyword is a metric name).
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	expr = stringLiteral.ReplaceAllString(expr, `""`)
	expr = braces.ReplaceAllString(expr, " ")
	expr = brackets.ReplaceAllString(expr, " ")
	var names []string
	locs := token.FindAllStringIndex(expr, -1)
	for i := 0; i < len(locs); i++ {
		word := expr[locs[i][0]:locs[i][1]]
		rest := strings.TrimLeft(expr[locs[i][1]:], " \t\n")
		switch {
		case word[0] >= '0' && word[0] <= '9':
		case labelListKeywords[word]:
			if strings.HasPrefix(rest, "(") {
				end := locs[i][1] + strings.Index(expr[locs[i][1]:], ")")
				for i+1 < len(locs) && locs[i+1][0] < end {
					i++
				}
			}
		case promqlKeywords[word], strings.HasPrefix(rest, "("):
		default:
			names = append(names, word)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	tests := map[string]struct {
		expr string
		want []string
	}{
		"selector": {
			expr: `proxy_operator_proxies{job="proxy-operator", phase="Ready"}`,
			want: []string{"proxy_operator_proxies"},
		},
		"aggregation with a label list": {
			expr: `max by (namespace, phase) (proxy_operator_proxies{job=~"$job"})`,
			want: []string{"proxy_operator_proxies"},
		},
		"histogram quantile over a range": {
			expr: `histogram_quantile(0.99, sum by (le) (rate(proxy_operator_probe_duration_seconds_bucket{job="x"}[$__rate_interval])))`,
			want: []string{"proxy_operator_probe_duration_seconds_bucket"},
		},
		"binary operators and vector matching": {
			expr: "time() - max(a_seconds{x=\"y\"}) > 120\n  and on () sum(b_total) > 0 unless ignoring (instance) c offset 5m",
			want: []string{"a_seconds", "b_total", "c"},
		},
		"a label value that looks like a name": {
			expr: `sum(rate(x_total{outcome=~"none_free|cooling_down", q='by'}[10m])) / sum(rate(x_total[10m])) > 0.2`,
			want: []string{"x_total", "x_total"},
		},
		"grafana label_values": {
			expr: `label_values(proxy_operator_build_info, job)`,
			want: []string{"proxy_operator_build_info"},
		},
		"no metric": {
			expr: `vector(1) * 2e3`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, metricNames(tc.expr)); diff != "" {
				t.Errorf("metricNames(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}
