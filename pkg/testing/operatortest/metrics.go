package operatortest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Get fetches url and returns the status and the body.
func Get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Scraped is one scrape of /metrics, by metric name.
type Scraped map[string]*dto.MetricFamily

// Scrape reads and parses metricsURL+"/metrics".
func Scrape(ctx context.Context, metricsURL string) (Scraped, error) {
	code, body, err := Get(ctx, metricsURL+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing %s/metrics: %w", metricsURL, err)
	}
	return families, nil
}

// Value is the value of the series of name whose labels include want (a
// counter's or gauge's value, a histogram's or summary's count); false if
// there is none. Several matching series are added up, so a nil want sums
// every series of name.
func (s Scraped) Value(name string, want map[string]string) (float64, bool) {
	var total float64
	found := false
	for _, m := range s[name].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			total += float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
