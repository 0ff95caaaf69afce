package gatewaycmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// freeAddr is a loopback address free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := get(url)
		if status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s, want %d", url, status, body, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRunLifecycle: /readyz follows the lease API's leader, --profiling
// serves pprof, and a cancelled context (SIGTERM) turns /readyz 503 for the
// drain delay before Run returns.
func TestRunLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	st, err := store.New(store.Config{Key: []byte("gatewaycmd-run-test-key-32-bytes")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: st, Authenticator: auth.None{}, Authorizer: auth.None{}, Horizon: &failover.MemoryHorizon{}})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(srv.Handler())
	defer api.Close()

	for _, profiling := range []bool{false, true} {
		t.Run(fmt.Sprintf("profiling=%v", profiling), func(t *testing.T) {
			o := DefaultOptions()
			o.Listen, o.MetricsAddr, o.LeaseURLs, o.LeaseAuth = freeAddr(t), freeAddr(t), []string{api.URL}, AuthNone
			o.DrainDelay, o.Profiling = time.Second, profiling
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- Run(runCtx, o, "test") }()
			base := "http://" + o.MetricsAddr

			waitStatus(t, base+"/healthz", http.StatusOK)
			waitStatus(t, base+"/readyz", http.StatusServiceUnavailable) // no leader yet
			if err := srv.StartLeading(ctx); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, base+"/readyz", http.StatusOK)
			wantPprof := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]
			if status, _ := get(base + "/debug/pprof/"); status != wantPprof {
				t.Errorf("/debug/pprof/ with --profiling=%v: %d, want %d", profiling, status, wantPprof)
			}

			stop()
			waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
			if err := srv.StopLeading(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
