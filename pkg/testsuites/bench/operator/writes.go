package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}

// counts are counters by key: write requests by resource ("proxies",
// "proxies/status", "events", ...), probes by result, events by reason.
type counts map[string]float64

// apiWrites are the write requests the API server has served: all of them,
// whatever their response code (every one is work for the API server and
// counts against the client's rate limit), and the rejected ones (not 2xx:
// conflicts, say) among them.
type apiWrites struct {
	all, rejected counts
}

// scrapeWrites reads kube-apiserver's /metrics.
func scrapeWrites(ctx context.Context, kube kubernetes.Interface) (apiWrites, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiWrites{}, fmt.Errorf("scraping kube-apiserver /metrics: %w", err)
	}
	return parseWrites(bytes.NewReader(body))
}

// parseWrites sums apiserver_request_total over the write verbs, by
// resource and subresource.
func parseWrites(r io.Reader) (apiWrites, error) {
	out := apiWrites{all: counts{}, rejected: counts{}}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return out, fmt.Errorf("parsing kube-apiserver /metrics: %w", err)
	}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !writeVerbs[labels["verb"]] {
			continue
		}
		key := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out.all[key] += m.GetCounter().GetValue()
		if !strings.HasPrefix(labels["code"], "2") {
			out.rejected[key] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// sub returns w − before.
func (w apiWrites) sub(before apiWrites) apiWrites {
	return apiWrites{all: w.all.sub(before.all), rejected: w.rejected.sub(before.rejected)}
}

// sub returns w − before, resource by resource, dropping zeros.
func (w counts) sub(before counts) counts {
	out := counts{}
	for k, v := range w {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// others formats every resource but the named ones as "leases 12,
// configmaps 1", largest first, each divided by per.
func (w counts) others(per float64, format string, except ...string) string {
	var parts []string
	for _, k := range w.largestFirst() {
		if !slices.Contains(except, k) {
			parts = append(parts, fmt.Sprintf("%s "+format, k, w[k]/per))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// largestFirst returns the keys by decreasing count, ties by name.
func (w counts) largestFirst() []string {
	keys := slices.Collect(maps.Keys(w))
	slices.SortFunc(keys, func(a, b string) int {
		if w[a] != w[b] {
			if w[a] > w[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}
