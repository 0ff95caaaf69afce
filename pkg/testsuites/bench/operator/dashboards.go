package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// dashboardResult is the operator's CPU and memory over a window with no
// dashboard open, then over one with viewers open (issue 55).
type dashboardResult struct {
	viewers               int
	without, with         procWindow
	heapWithout, heapWith float64 // go_memstats_heap_inuse_bytes at each window's end
	views                 int64   // views the streams received in their window
	viewBytes             int64   // the largest one, in bytes
}

// measureDashboards measures the operator over window with no stream open,
// then opens viewers streams of /ui/api/stream (--lease-auth=none), waits
// until each has its first view, and measures over another window while
// they read every update.
func (b *bench) measureDashboards(ctx context.Context, op *operatorProcess, viewers int, window time.Duration) (dashboardResult, error) {
	res := dashboardResult{viewers: viewers}
	measure := func() (procWindow, float64, error) {
		u0, err := readUsage(op.PID())
		if err != nil {
			return procWindow{}, 0, err
		}
		start := time.Now()
		select {
		case <-time.After(window):
		case <-ctx.Done():
			return procWindow{}, 0, ctx.Err()
		}
		u1, err := readUsage(op.PID())
		if err != nil {
			return procWindow{}, 0, err
		}
		heap, err := scrapeGauge(ctx, op.metricsURL, "go_memstats_heap_inuse_bytes")
		cores := (u1.cpuSeconds - u0.cpuSeconds) / time.Since(start).Seconds()
		return procWindow{cores: cores, rss: u1.rss, hwm: u1.hwm}, heap, err
	}
	var err error
	if res.without, res.heapWithout, err = measure(); err != nil {
		return res, fmt.Errorf("without dashboards: %w", err)
	}

	streamCtx, stop := context.WithCancel(ctx)
	var (
		wg               sync.WaitGroup
		views, viewBytes atomic.Int64
		first            = make(chan error, viewers)
	)
	defer func() { stop(); wg.Wait() }() // the streams end with their context
	for range viewers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readStream(streamCtx, "http://"+op.leaseAddr+"/ui/api/stream", first, &views, &viewBytes)
		}()
	}
	for range viewers {
		if err := <-first; err != nil {
			return res, fmt.Errorf("opening a dashboard stream: %w", err)
		}
	}
	views.Store(0)
	if res.with, res.heapWith, err = measure(); err != nil {
		return res, fmt.Errorf("with %d dashboards: %w", viewers, err)
	}
	res.views, res.viewBytes = views.Load(), viewBytes.Load()
	return res, nil
}

// readStream reads one dashboard stream until ctx ends, reporting on first
// once it has its first view (or why not) and counting the views.
func readStream(ctx context.Context, url string, first chan<- error, views, largest *atomic.Int64) {
	reported := false
	report := func(err error) {
		if !reported {
			reported = true
			first <- err
		}
	}
	defer report(errors.New("the stream ended before its first view"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		report(err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		report(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		report(fmt.Errorf("GET /ui/api/stream: %s", resp.Status))
		return
	}
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "data: ") {
			views.Add(1)
			for n := int64(len(line)); ; {
				old := largest.Load()
				if n <= old || largest.CompareAndSwap(old, n) {
					break
				}
			}
			report(nil)
		}
	}
}

// scrapeGauge reads one unlabelled gauge from the operator's /metrics.
func scrapeGauge(ctx context.Context, metricsURL, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping the operator's /metrics: %w", err)
	}
	defer resp.Body.Close()
	return parseGauge(resp.Body, name)
}

func parseGauge(r io.Reader, name string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parsing /metrics: %w", err)
	}
	f, ok := families[name]
	if !ok || len(f.GetMetric()) == 0 {
		return 0, fmt.Errorf("/metrics has no %s", name)
	}
	return f.GetMetric()[0].GetGauge().GetValue(), nil
}

// formatDashboards is the table of the dashboard measurement.
func formatDashboards(results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	mib := func(b float64) float64 { return b / (1 << 20) }
	for _, r := range results {
		d := r.dashboards
		if d == nil {
			continue
		}
		p("\n### The dashboard: the operator with %d open dashboards against none\n\n", d.viewers)
		p("| proxies | leases held | open dashboard streams | operator CPU (cores) | operator RSS (MiB) | operator heap in use (MiB) | views sent in the window | largest view (KiB) |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		p("| %d | %d | 0 | %.3f | %.0f | %.0f | – | – |\n", r.spec.proxies, r.leases, d.without.cores, mib(float64(d.without.rss)), mib(d.heapWithout))
		p("| %d | %d | %d | %.3f | %.0f | %.0f | %d | %.0f |\n", r.spec.proxies, r.leases, d.viewers, d.with.cores, mib(float64(d.with.rss)), mib(d.heapWith), d.views, float64(d.viewBytes)/1024)
	}
	return sb.String()
}
