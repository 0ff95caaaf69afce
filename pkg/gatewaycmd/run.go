package gatewaycmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/kubeconfig"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// reviewQPS is the callers' TokenReviews' and SubjectAccessReviews' own
// client budget, as the operator's --lease-auth-qps default.
const reviewQPS = 50

// Run serves the gateway until ctx ends (SIGTERM), then drains: readiness
// false for DrainDelay, the listener closed, open tunnels given
// ShutdownGrace, rotating leases released. version labels the build metric.
func Run(ctx context.Context, o Options, version string) error {
	logger := klog.FromContext(ctx)
	authn, authz, err := o.auth(ctx, version)
	if err != nil {
		return err
	}
	remote, err := gateway.NewRemote(gateway.RemoteConfig{URLs: o.LeaseURLs, Token: o.token(), LeaderWait: o.LeaderWait})
	if err != nil {
		return err
	}
	m, metricsHandler := metrics.NewGateway(version, metrics.GatewayLabels{Modes: gateway.Modes, Directions: gateway.Directions, ErrorReasons: gateway.ErrorReasons})
	cfg := gateway.Config{
		Leases: remote, Authenticator: authn, Authorizer: authz, AuthNone: o.LeaseAuth == AuthNone,
		Wait: o.Wait, SessionIdle: o.SessionIdle, TTL: o.LeaseTTL, ShutdownGrace: o.ShutdownGrace, Metrics: m,
	}
	if err := o.inspection(ctx, version, &cfg); err != nil {
		return err
	}
	if o.WatchCrawlPolicies {
		if cfg.BanRules, err = o.banRules(ctx, version); err != nil {
			return fmt.Errorf("--watch-crawl-policies: %w", err)
		}
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mln, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--metrics-addr: %w", err)
	}

	var draining atomic.Bool
	mux := healthMux(metricsHandler, remote, &draining)
	if o.Profiling {
		metrics.RegisterProfiling(mux)
	}
	health := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := health.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Serving metrics and health")
		}
	}()
	defer health.Close()

	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go remote.Watch(serveCtx)
	served := make(chan error, 1)
	go func() { served <- gw.Serve(serveCtx, ln) }()
	logger.Info("Gateway replica started", "listen", ln.Addr().String(), "metrics", mln.Addr().String(), "leaseURLs", o.LeaseURLs, "auth", o.LeaseAuth)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	logger.Info("Draining: not ready, still serving until the Service has stopped sending", "drainDelay", o.DrainDelay, "shutdownGrace", o.ShutdownGrace)
	select {
	case <-time.After(o.DrainDelay):
	case err := <-served:
		return err
	}
	stopServing()
	return <-served
}

// healthMux serves /metrics, /healthz (the process runs) and /readyz (a
// lease API leader answers and the replica is not draining).
func healthMux(metricsHandler http.Handler, remote *gateway.Remote, draining *atomic.Bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case draining.Load():
			http.Error(w, "draining: this replica is shutting down", http.StatusServiceUnavailable)
		case !remote.LeaderReachable():
			http.Error(w, "no lease API leader answers: new connections would wait", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}

// inspection sets up TLS inspection when --inspection-ca-namespace names
// where the CAs are.
func (o Options) inspection(ctx context.Context, version string, cfg *gateway.Config) error {
	if o.InspectionCANamespace == "" {
		return nil
	}
	kube, err := o.kube(version)
	if err != nil {
		return err
	}
	if cfg.TargetRootCAs, err = targetRoots(o.InspectionTargetRoots); err != nil {
		return err
	}
	minters, err := watchCAs(ctx, kube, o.InspectionCANamespace)
	if err != nil {
		return err
	}
	cfg.Inspection, cfg.InspectedPorts = minters, o.InspectionPorts
	return nil
}

// kube is the replica's Kubernetes client.
func (o Options) kube(version string) (kubernetes.Interface, error) {
	cfg, err := kubeconfig.Load(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = reviewQPS, 2*reviewQPS
	cfg.UserAgent = "proxy-operator-gateway/" + version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kube, nil
}

// auth checks the callers as the lease API does.
func (o Options) auth(ctx context.Context, version string) (auth.Authenticator, auth.Authorizer, error) {
	if o.LeaseAuth == AuthNone {
		a := auth.NewNone(klog.FromContext(ctx))
		return a, a, nil
	}
	kube, err := o.kube(version)
	if err != nil {
		return nil, nil, err
	}
	a := auth.NewKubernetes(kube, auth.KubernetesOptions{})
	return a, a, nil
}

// token is the gateway's own bearer token for the lease API.
func (o Options) token() client.TokenFunc {
	path := o.LeaseTokenFile
	if path == "" {
		if _, err := os.Stat(serviceAccountToken); err != nil {
			return nil // no token: only a lease API without auth lets the calls in
		}
		path = serviceAccountToken
	}
	return client.TokenFile(path)
}
