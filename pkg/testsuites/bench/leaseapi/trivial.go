package main

// The trivial handler: the reference the operator's lease API is measured
// against, a process of its own answering the operator's own grant.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// startTrivial starts the trivial handler (this binary, -serve-trivial),
// answering acquires with the body of one real grant of the operator at
// leaseURL, so that it answers what the operator answers.
func startTrivial(ctx context.Context, dir, leaseURL, ns string, clients int) (*benchkit.Process, *leaseclient.Client, error) {
	grant, err := grantBody(ctx, leaseURL, ns)
	if err != nil {
		return nil, nil, fmt.Errorf("phase \"one grant\": %w", err)
	}
	bodyPath := filepath.Join(dir, "grant.json")
	if err := os.WriteFile(bodyPath, grant, 0o600); err != nil {
		return nil, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	trivial, err := benchkit.Start(self, filepath.Join(dir, "trivial.log"), 2, func(ports []int) []string {
		return []string{"-serve-trivial=" + bodyPath, fmt.Sprintf("-addr=127.0.0.1:%d", ports[0]), fmt.Sprintf("-bare-trivial=%v", *bareTrivial)}
	})
	if err != nil {
		return nil, nil, err
	}
	if err := trivial.WaitReady(ctx, "http://"+trivial.Addr(0)+"/healthz", 30*time.Second); err != nil {
		trivial.Kill()
		return nil, nil, fmt.Errorf("phase \"trivial handler\": %w", err)
	}
	tc, err := newClient("http://"+trivial.Addr(0), clients)
	if err != nil {
		trivial.Kill()
		return nil, nil, err
	}
	return trivial, tc, nil
}

// grantBody is the body of one real grant (released again at once).
func grantBody(ctx context.Context, leaseURL, ns string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leaseURL+"/v1/leases", strings.NewReader(`{"holder":"bench-0","namespace":"`+ns+`"}`))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("acquire: %v %s: %s", err, resp.Status, body)
	}
	del, err := http.NewRequestWithContext(ctx, http.MethodDelete, leaseURL+resp.Header.Get("Location"), nil)
	if err != nil {
		return nil, err
	}
	delResp, err := http.DefaultClient.Do(del)
	if err != nil {
		return nil, err
	}
	delResp.Body.Close()
	if delResp.StatusCode != http.StatusNoContent {
		return nil, fmt.Errorf("release: %s", delResp.Status)
	}
	return body, nil
}

var (
	trivialAddr    = flag.String("addr", "127.0.0.1:0", "internal: the trivial handler's address (with -serve-trivial)")
	baselineRef    = flag.String("baseline-ref", "", "A/B: also build cmd/proxy-operator at these git refs (comma-separated; a worktree each in a temporary directory, removed after) and measure them in the same alternating rounds")
	baselineBinary = flag.String("baseline-binary", "", "A/B: baseline operator binaries (comma-separated), beside or instead of -baseline-ref")
	bareTrivial    = flag.Bool("bare-trivial", false, "serve the trivial handler with net/http's defaults and a header timeout, not the lease API's server settings (its timeouts and header limit)")
)

// serveTrivial answers POST /v1/leases with the grant in bodyPath (and its
// Location) and DELETE /v1/leases/{id} with 204, as the lease API does,
// with nothing behind them.
func serveTrivial(bodyPath string) error {
	body, err := os.ReadFile(bodyPath)
	if err != nil {
		return err
	}
	location := "/v1/leases/" + idOf(body)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", location)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("DELETE /v1/leases/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	ln, err := net.Listen("tcp", *trivialAddr)
	if err != nil {
		return err
	}
	// The lease API's own server settings: the same per-request deadlines.
	if *bareTrivial {
		return (&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}).Serve(ln)
	}
	return server.NewHTTPServer(mux, store.DefaultMaxWait).Serve(ln)
}

// idOf is the "id" member of a grant body.
func idOf(body []byte) string {
	_, rest, _ := strings.Cut(string(body), `"id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}
