package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"k8s.io/klog/v2"
)

// serveMetrics serves /metrics, /healthz and /readyz until stop closes (the
// leader path is done) and then shuts down gracefully. ctx only carries the
// logger: the server outlives the shutdown request on purpose.
func (op *operator) serveMetrics(ctx context.Context, ln net.Listener, stop <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", op.metrics.Handler())
	mux.HandleFunc("GET /healthz", op.serveHealthz)
	mux.HandleFunc("GET /readyz", op.serveReadyz)
	if op.opts.Profiling {
		metrics.RegisterProfiling(mux)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("metrics server on %s: %w", ln.Addr(), err)
	case <-stop:
	}
	logger.V(2).Info("Shutting down the metrics server")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	<-served // http.ErrServerClosed once Shutdown began
	if err != nil {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	logger.V(2).Info("Metrics server stopped")
	return nil
}

// serveHealthz answers ok, unless this replica leads without renewing the
// lease (client-go's WatchDog): then the kubelet restarts it, as it does
// kube-controller-manager.
func (op *operator) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if op.electionWatchdog != nil {
		if err := op.electionWatchdog.Check(r); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "leader election: %v\n", err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// serveReadyz is 200 once the informer caches have synced, on every replica,
// and, with a replicated lease store, once this replica may take lease
// calls (it leads the Raft group, or votes and has caught up): the Pod's
// readiness probe, so that the leases Service routes to ready replicas only
// and a rolling update waits for each new replica to catch up. It follows
// nothing else (not leadership: a standby with warm caches is ready to take
// over).
func (op *operator) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, synced := range op.synced {
		if !synced() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "informer caches not synced")
			return
		}
	}
	if op.replica != nil && !replicaReady(op.replica, op.opts.Replication.ReplicaID) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not yet a caught-up voting member of the lease store's Raft group")
		return
	}
	fmt.Fprintln(w, "ok")
}
