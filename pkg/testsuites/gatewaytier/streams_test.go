package gatewaytier

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// streamChunk is what the target writes per tick.
const streamChunk = 16 << 10

// streamTarget answers /stream?chunks=N&every=D with N chunks, one every D,
// with a Content-Length, so that a cut tunnel is a short body (curl exit
// 18). It counts the streams in flight.
type streamTarget struct {
	url    string
	active atomic.Int32
}

func startStreamTarget(t *testing.T) *streamTarget {
	st := &streamTarget{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunks, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
		every, _ := time.ParseDuration(r.URL.Query().Get("every"))
		st.active.Add(1)
		defer st.active.Add(-1)
		w.Header().Set("Content-Length", strconv.Itoa(chunks*streamChunk))
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, streamChunk)
		for i := range chunks {
			if i > 0 {
				select {
				case <-time.After(every):
				case <-r.Context().Done():
					return
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	st.url = srv.URL
	return st
}

// stream is one curl download through a gateway, started by startStreams.
type stream struct {
	gateway, username string
	// Set when it ends:
	exitErr error
	size    int
	stderr  string
}

// startStreams runs one curl per username (each "gateway|username") through
// its gateway, each downloading chunks chunks spaced by every, and returns
// a wait that gives their results.
func (s *tierSetup) startStreams(t *testing.T, specs []string, chunks int, every time.Duration) func() []*stream {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: run make deps")
	}
	target := fmt.Sprintf("%s/stream?chunks=%d&every=%s", s.target.url, chunks, every)
	var wg sync.WaitGroup
	streams := make([]*stream, len(specs))
	for i, spec := range specs {
		gw, username, _ := strings.Cut(spec, "|")
		st := &stream{gateway: gw, username: username}
		streams[i] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			proxy := (&url.URL{Scheme: "http", Host: gw, User: url.UserPassword(username, s.crawlerToken)}).String()
			// -p: a CONNECT tunnel even for http://, as for every https:// crawl.
			cmd := exec.CommandContext(context.WithoutCancel(t.Context()), "curl", "-sS", "-p", "-x", proxy, "--max-time", "120",
				"-o", "/dev/null", "-w", "%{size_download}", target)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			st.exitErr, st.stderr = err, stderr.String()
			st.size, _ = strconv.Atoi(strings.TrimSpace(string(out)))
		}()
	}
	return func() []*stream {
		wg.Wait()
		return streams
	}
}

// checkStreams fails for every stream that was cut or short.
func checkStreams(t *testing.T, what string, streams []*stream, chunks int) {
	t.Helper()
	want := chunks * streamChunk
	cut := 0
	for _, st := range streams {
		if st.exitErr != nil || st.size != want {
			cut++
			t.Errorf("%s: stream through %s as %s: %d of %d bytes, %v %s", what, st.gateway, st.username, st.size, want, st.exitErr, st.stderr)
		}
	}
	t.Logf("%s: %d of %d tunnels cut, %d bytes each", what, cut, len(streams), want)
}
