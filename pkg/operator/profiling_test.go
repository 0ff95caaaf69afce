package operator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// TestProfilingFlag: with --profiling the metrics server serves a heap
// profile (gzipped protobuf, what `go tool pprof` reads); without it the
// path is unknown, and /metrics is served either way.
func TestProfilingFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		profiling bool
		wantHeap  int
	}{
		"on":  {profiling: true, wantHeap: http.StatusOK},
		"off": {profiling: false, wantHeap: http.StatusNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			opts.Profiling = tc.profiling
			op := &operator{opts: opts, metrics: metrics.New(metricLabels())}
			stop := make(chan struct{})
			served := make(chan error, 1)
			go func() { served <- op.serveMetrics(context.Background(), ln, stop) }()
			defer func() {
				close(stop)
				if err := <-served; err != nil {
					t.Error(err)
				}
			}()
			get := func(path string) (int, []byte) {
				resp, err := http.Get(fmt.Sprintf("http://%s%s", ln.Addr(), path))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, body
			}
			if code, _ := get("/metrics"); code != http.StatusOK {
				t.Errorf("/metrics: %d, want 200", code)
			}
			code, body := get("/debug/pprof/heap")
			if code != tc.wantHeap {
				t.Fatalf("/debug/pprof/heap: %d, want %d", code, tc.wantHeap)
			}
			if gzipMagic := []byte{0x1f, 0x8b}; code == http.StatusOK && !bytes.HasPrefix(body, gzipMagic) {
				t.Errorf("/debug/pprof/heap is not a gzipped profile: %q", body[:min(len(body), 40)])
			}
		})
	}
}
