package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
)

// Server timeouts. Reading a request head is bounded; the answer is not
// (a connection may wait --gateway-wait for a proxy, a tunnel lasts).
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 32 << 10
	// releaseTimeout bounds giving the leases back at shutdown.
	releaseTimeout = 10 * time.Second
)

// Serve serves the gateway on ln until ctx ends, with the janitor that
// renews its leases and ends idle sessions. At shutdown it stops accepting,
// lets open tunnels finish for Config.ShutdownGrace and then closes them,
// and releases its rotating leases (releaseAll).
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          nil,
	}
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		g.runJanitor(baseCtx)
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("Serving the gateway", "addr", ln.Addr().String())

	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownGrace)
		err = srv.Shutdown(shutdownCtx) // hijacked tunnels are not waited for by Shutdown
		g.closeTunnels(shutdownCtx)
		cancel()
		if servedErr := <-served; !errors.Is(servedErr, http.ErrServerClosed) && err == nil {
			err = servedErr
		}
	}
	cancelBase()
	<-janitorDone
	releaseCtx, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	g.releaseAll(releaseCtx, logger)
	cancelRelease()
	g.transport.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	logger.V(2).Info("Gateway stopped")
	return nil
}

// closeTunnels waits for open tunnels until ctx ends, then closes them.
func (g *Gateway) closeTunnels(ctx context.Context) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.tunnelsWG.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	g.mu.Lock()
	for c := range g.tunnels {
		c.Close()
	}
	g.mu.Unlock()
	<-done
}

func (g *Gateway) runJanitor(ctx context.Context) {
	t := g.cfg.Clock.NewTicker(g.cfg.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			g.Tidy(ctx)
		}
	}
}

// Tidy renews the leases that are due and ends sessions idle for longer
// than SessionIdle. The janitor calls it; tests with a fake clock may too.
func (g *Gateway) Tidy(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := g.cfg.Clock.Now()
	g.mu.Lock()
	rotating := make([]*holding, 0, len(g.rotating))
	for h := range g.rotating {
		rotating = append(rotating, h)
	}
	type idle struct {
		key sessionKey
		s   *session
	}
	var sessions []idle
	for k, s := range g.sessions {
		sessions = append(sessions, idle{k, s})
	}
	g.mu.Unlock()

	for _, h := range rotating {
		h.renewIfDue(ctx, g.cfg.Leases, now, logger)
	}
	for _, e := range sessions {
		s := e.s
		s.mu.Lock()
		isIdle := s.active == 0 && now.Sub(s.lastUsed) >= g.cfg.SessionIdle
		h := s.held
		if isIdle {
			s.held = nil
		}
		s.mu.Unlock()
		if isIdle {
			if h != nil {
				// Not released: other replicas may carry the session on
				// the same lease; unrenewed, it lapses at its expiry.
				h.drop(ctx, g.cfg.Leases, logger)
				logger.V(4).Info("Idle session left to lapse", "session", e.key.id, "namespace", e.key.namespace, "proxy", h.proxy)
			}
			g.mu.Lock()
			s.mu.Lock()
			// Still idle: no connection joined while we released.
			if s.active == 0 && s.held == nil && g.sessions[e.key] == s {
				delete(g.sessions, e.key)
			}
			s.mu.Unlock()
			g.cfg.Metrics.SetGatewaySessions(len(g.sessions))
			g.mu.Unlock()
			continue
		}
		if h != nil && !h.renewIfDue(ctx, g.cfg.Leases, now, logger) {
			s.mu.Lock()
			if s.held == h {
				s.held = nil // the next connection acquires another
			}
			s.mu.Unlock()
		}
	}
}

// releaseAll gives back the rotating leases at shutdown; the sessions'
// lapse, as when idle, so that the session keeps its upstream through
// another replica.
func (g *Gateway) releaseAll(ctx context.Context, logger klog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for h := range g.rotating {
		h.release(ctx, g.cfg.Leases, client.OutcomeOK, "", logger)
	}
	for k, s := range g.sessions {
		s.mu.Lock()
		if s.held != nil {
			s.held.drop(ctx, g.cfg.Leases, logger)
			s.held = nil
		}
		s.mu.Unlock()
		delete(g.sessions, k)
	}
	g.cfg.Metrics.SetGatewaySessions(0)
}
