package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 64 << 10
	DefaultHorizonStep  = 10 * time.Second
	DefaultMaxClockSkew = 2 * time.Second
)

// HTTP server timeouts. WriteTimeout is the store's MaxWait plus writeSlack,
// so that a long poll is never cut off by its own server.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeSlack        = 15 * time.Second
	idleTimeout       = 2 * time.Minute
	// maxHeaderBytes is the API's limit on a request's head, answered 431
	// in JSON by the handler; net/http's own limit (serverMaxHeaderBytes)
	// is above it, because net/http answers in plain text.
	maxHeaderBytes       = 16 << 10
	serverMaxHeaderBytes = 64 << 10
	shutdownTimeout      = 10 * time.Second
	// janitorInterval keeps the gauges current when no call advances the store.
	janitorInterval = time.Second
	// horizonSaveTimeout bounds one horizon write in a request's path.
	horizonSaveTimeout = 5 * time.Second
)

// CredentialsFunc returns the credentials of lease l's proxy, nil if it
// needs none: for a proxy whose instance checks lease credentials, a
// password signed for the lease and its end (Credentials.LeaseBound),
// else the proxy's own. They are handed to the holder in the response that
// grants the lease and, when lease-bound, in each renewal's (the fresh end),
// and nowhere else. auth.ErrGatewayOnly (ctx is no auth.ActingFor call)
// refuses the grant. Its errors must not contain the credentials.
// feed.LeaseCredentials is the operator's.
type CredentialsFunc func(ctx context.Context, l store.Lease) (*proxyaccess.Credentials, error)

// Leases is what the handlers ask of the store: *store.Store itself, or
// the store's replication (replica.Router), which runs each call on the
// Raft leader's working store.
type Leases interface {
	Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error)
	RenewAs(owner, id string, ttl time.Duration, r store.Report) (store.Lease, error)
	ReleaseAs(owner, id string, outcome store.Outcome, domain string, r store.Report) error
	GetAs(owner, id string) (store.Lease, error)
	List(f store.LeaseFilter) ([]store.Lease, error)
	Proxies(namespace string, sel labels.Selector) []store.ProxyStatus
	LeaseNamespace(owner, id string) (string, error)
	PutStateAs(owner, id string, blob []byte) error
	PutSessionStateAs(owner, scope, session, domain string, blob []byte) error
	SessionLeases(owner, scope, session string) []store.Lease
	ForgetSession(owner, scope, session string)
}

// Config configures a Server.
type Config struct {
	// Store holds the leases. Required.
	Store *store.Store
	// Replicated, when set, is the store's replication across the
	// operator's replicas (pkg/lease/replica): every replica answers the
	// /v1 calls, which Replicated.Leases runs on the leader's store; the
	// store leads by the replication (Raft), not by StartLeading, and
	// keeps no horizon. Nil: the store is this process's alone.
	Replicated *Replication
	// Authenticator and Authorizer check every /v1 call. Required: use
	// auth.NewKubernetes, or auth.NewNone for local development.
	Authenticator auth.Authenticator
	Authorizer    auth.Authorizer
	// Credentials, if set, adds the proxy's credentials to the response that
	// grants a lease, and lease-bound ones to each renewal's.
	Credentials CredentialsFunc
	// Horizon persists this leader's horizon so that a successor knows how
	// long to wait after a crash. Without it a new leader refuses grants for
	// the store's MaxTTL (plus MaxClockSkew) after it starts leading.
	Horizon failover.HorizonStore
	// HorizonStep is how far ahead of the latest expiry the persisted
	// horizon runs: larger means fewer writes, and a longer wait for a
	// successor after a crash.
	HorizonStep time.Duration
	// MaxClockSkew is how far apart the replicas' clocks may be.
	MaxClockSkew time.Duration
	// MaxBodyBytes bounds request bodies.
	MaxBodyBytes int64
}

// Replication is what the server needs of the store's replication.
type Replication struct {
	// Leases runs the calls on the leader's store.
	Leases Leases
	// Ready says whether this replica may take lease calls (its
	// /readyz): it is Synced, and a voting member that has caught up
	// with the log.
	Ready func() bool
	// Synced says whether what a lease call reads on this replica (the
	// Proxies and their Secrets, for the credentials) has been listed.
	// Before, every /v1 call is answered 503 NotLeader, as the Service
	// would not route it here.
	Synced func() bool
}

// Server is the lease API over HTTP (docs/api.md). Every replica may serve
// it; only the leader (between StartLeading and StopLeading) answers /v1
// calls and /readyz, the others answer 503 NotLeader.
type Server struct {
	store       *store.Store
	leases      Leases
	replicated  *Replication
	clock       clock.WithTicker
	authn       auth.Authenticator
	authz       auth.Authorizer
	credentials CredentialsFunc
	maxBody     int64
	skew        time.Duration
	mux         *http.ServeMux
	leading     atomic.Bool
	horizon     *horizonKeeper // nil without a HorizonStore
	// readTimeout is readTimeout; tests shorten it.
	readTimeout time.Duration
}

// NewServer builds the server; it starts nothing.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("a Store is required"))
	}
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		errs = append(errs, errors.New("an Authenticator and an Authorizer are required (auth.NewNone for none)"))
	}
	if cfg.HorizonStep < 0 || cfg.MaxClockSkew < 0 || cfg.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("negative HorizonStep, MaxClockSkew or MaxBodyBytes"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lease server: %w", err)
	}
	s := &Server{
		store:       cfg.Store,
		leases:      cfg.Store,
		replicated:  cfg.Replicated,
		clock:       cfg.Store.Config().Clock,
		authn:       cfg.Authenticator,
		authz:       cfg.Authorizer,
		credentials: cfg.Credentials,
		maxBody:     cfg.MaxBodyBytes,
		skew:        cfg.MaxClockSkew,
		mux:         http.NewServeMux(),
		readTimeout: readTimeout,
	}
	if s.replicated != nil {
		// Every replica answers; the replication says who decides.
		s.leases = s.replicated.Leases
		s.leading.Store(true)
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.skew == 0 {
		s.skew = DefaultMaxClockSkew
	}
	if cfg.Horizon != nil {
		step := cfg.HorizonStep
		if step == 0 {
			step = DefaultHorizonStep
		}
		s.horizon = &horizonKeeper{backend: cfg.Horizon, store: cfg.Store, clock: s.clock, step: step}
	}
	s.routes()
	return s, nil
}

// Store is the server's lease store, for the doors beside the API: the
// pool controller's counts and the CrawlPolicy feed and status writer.
func (s *Server) Store() *store.Store { return s.store }

// StartLeading makes this replica the lease API's leader. Call it after the
// leader election was won and the Proxy feed has synced. With a HorizonStore it
// claims it first, retrying until ctx ends (the only error); the store then
// refuses grants until the horizon of the previous leader has passed, and
// re-learns that leader's leases from their renewals meanwhile. Without a
// HorizonStore the refusal lasts MaxTTL.
func (s *Server) StartLeading(ctx context.Context) error {
	if s.replicated != nil {
		return nil // the replication leads the store
	}
	logger := klog.FromContext(ctx)
	if s.horizon == nil {
		recoverUntil := s.clock.Now().Add(s.store.Config().MaxTTL + s.skew)
		s.store.Lead(recoverUntil, time.Time{})
		s.leading.Store(true)
		logger.Info("Leading the lease API; no horizon store, so no grants until the previous leader's leases have surely expired",
			"recoverUntil", recoverUntil)
		return nil
	}
	previous, err := s.horizon.claim(ctx)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	var recoverUntil time.Time
	switch {
	case errors.Is(previous.err, failover.ErrHorizonUnknown):
		recoverUntil = now.Add(s.store.Config().MaxTTL + s.skew)
	case !previous.horizon.IsZero():
		recoverUntil = previous.horizon.Add(s.skew)
	}
	s.store.Lead(recoverUntil, s.horizon.current())
	s.leading.Store(true)
	if recoverUntil.After(now) {
		logger.Info("Leading the lease API; recovering: no grants until every lease of the previous leader has expired or been renewed here",
			"previousHorizon", previous.horizon, "recoverUntil", recoverUntil)
	} else {
		logger.Info("Leading the lease API; no lease of a previous leader can still be live")
	}
	return nil
}

// StopLeading stops answering /v1 calls and forgets every lease. With a
// HorizonStore it persists the latest expiry among the live leases, so that a
// graceful handover makes the successor wait only that long.
func (s *Server) StopLeading(ctx context.Context) error {
	if s.replicated != nil {
		return nil // the replication leads the store
	}
	s.leading.Store(false)
	last := s.store.Abdicate()
	expireBy := "" // none live
	if !last.IsZero() {
		expireBy = last.UTC().Format(time.RFC3339Nano)
	}
	klog.FromContext(ctx).Info("Stopped leading the lease API", "liveLeasesExpireBy", expireBy)
	if s.horizon == nil {
		return nil
	}
	return s.horizon.finish(ctx, last)
}

// NewHTTPServer is the net/http server the lease API runs h in: its
// timeouts and header limit, for a store whose longest wait is maxWait.
// The lease API benchmark serves its trivial handler with it too, so that
// the reference pays the same per-request deadlines (docs/decisions/0155-lease-api-bench-trivial-handler-runs.md).
func NewHTTPServer(h http.Handler, maxWait time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      maxWait + writeSlack,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
	}
}

// Serve serves the API on ln until ctx ends, then shuts down gracefully:
// waiting acquires are woken and answered 503 so that clients retry
// elsewhere. It also runs the store's janitor.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	// Handlers see a context that ends when shutdown begins, so that long
	// polls return at once instead of holding the shutdown up.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := NewHTTPServer(s.Handler(), s.store.Config().MaxWait)
	srv.ReadTimeout = s.readTimeout
	srv.BaseContext = func(net.Listener) context.Context { return baseCtx }
	var wg sync.WaitGroup
	wg.Go(func() {
		t := s.clock.NewTicker(janitorInterval)
		defer t.Stop()
		for {
			select {
			case <-baseCtx.Done():
				return
			case <-t.C():
				s.store.Advance()
			}
		}
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("Serving the lease API", "addr", ln.Addr().String())

	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		cancelBase()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		err = srv.Shutdown(shutdownCtx)
		cancel()
		if servedErr := <-served; !errors.Is(servedErr, http.ErrServerClosed) && err == nil {
			err = servedErr
		}
	}
	cancelBase()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("lease API: %w", err)
	}
	logger.V(2).Info("Lease API stopped")
	return nil
}
