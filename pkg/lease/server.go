package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Defaults of ServerConfig.
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

// ServerConfig configures a Server.
type ServerConfig struct {
	// Store holds the leases. Required.
	Store *Store
	// Authenticator and Authorizer check every /v1 call. Required: use
	// NewKubernetesAuth, or NewNoAuth for local development.
	Authenticator Authenticator
	Authorizer    Authorizer
	// Credentials, if set, adds the proxy's credentials to the response that
	// grants a lease.
	Credentials CredentialsFunc
	// Horizon persists this leader's horizon so that a successor knows how
	// long to wait after a crash. Without it a new leader refuses grants for
	// the store's MaxTTL (plus MaxClockSkew) after it starts leading.
	Horizon HorizonStore
	// HorizonStep is how far ahead of the latest expiry the persisted
	// horizon runs: larger means fewer writes, and a longer wait for a
	// successor after a crash.
	HorizonStep time.Duration
	// MaxClockSkew is how far apart the replicas' clocks may be.
	MaxClockSkew time.Duration
	// MaxBodyBytes bounds request bodies.
	MaxBodyBytes int64
}

// Server is the lease API over HTTP (docs/api.md). Every replica may serve
// it; only the leader (between StartLeading and StopLeading) answers /v1
// calls and /readyz, the others answer 503 NotLeader.
type Server struct {
	store       *Store
	clock       clock.WithTicker
	authn       Authenticator
	authz       Authorizer
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
func NewServer(cfg ServerConfig) (*Server, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("a Store is required"))
	}
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		errs = append(errs, errors.New("an Authenticator and an Authorizer are required (NewNoAuth for none)"))
	}
	if cfg.HorizonStep < 0 || cfg.MaxClockSkew < 0 || cfg.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("negative HorizonStep, MaxClockSkew or MaxBodyBytes"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lease server: %w", err)
	}
	s := &Server{
		store:       cfg.Store,
		clock:       cfg.Store.clock,
		authn:       cfg.Authenticator,
		authz:       cfg.Authorizer,
		credentials: cfg.Credentials,
		maxBody:     cfg.MaxBodyBytes,
		skew:        cfg.MaxClockSkew,
		mux:         http.NewServeMux(),
		readTimeout: readTimeout,
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
	s.mux.HandleFunc("POST /v1/leases", s.leaderOnly(s.acquire))
	s.mux.HandleFunc("POST /v1/leases/{id}/renew", s.leaderOnly(s.renew))
	s.mux.HandleFunc("DELETE /v1/leases/{id}", s.leaderOnly(s.release))
	s.mux.HandleFunc("GET /v1/leases", s.leaderOnly(s.list))
	s.mux.HandleFunc("GET /v1/leases/{id}", s.leaderOnly(s.get))
	s.mux.HandleFunc("GET /v1/proxies", s.leaderOnly(s.proxies))
	s.mux.HandleFunc("DELETE /v1/sessions/{session}", s.leaderOnly(s.releaseSession)) // sessions.go
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.leading.Load() {
			writeError(w, http.StatusServiceUnavailable, codeNotLeader, "this replica is not the leader", "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "leading"})
	})
	return s, nil
}

// Leading reports whether the server answers /v1 calls.
func (s *Server) Leading() bool { return s.leading.Load() }

// StartLeading makes this replica the lease API's leader. Call it after the
// leader election was won and the Feed has synced. With a HorizonStore it
// claims it first, retrying until ctx ends (the only error); the store then
// refuses grants until the horizon of the previous leader has passed, and
// re-learns that leader's leases from their renewals meanwhile. Without a
// HorizonStore the refusal lasts MaxTTL.
func (s *Server) StartLeading(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if s.horizon == nil {
		recoverUntil := s.clock.Now().Add(s.store.cfg.MaxTTL + s.skew)
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
	case errors.Is(previous.err, ErrHorizonUnknown):
		recoverUntil = now.Add(s.store.cfg.MaxTTL + s.skew)
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
	s.leading.Store(false)
	last := s.store.Abdicate()
	klog.FromContext(ctx).Info("Stopped leading the lease API", "liveLeasesExpireBy", formatHorizon(last))
	if s.horizon == nil {
		return nil
	}
	return s.horizon.finish(ctx, last)
}

// Handler serves the API; 404 and 405 are answered in JSON like every error.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headBytes(r) > maxHeaderBytes {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestHeaderFieldsTooLarge, codeHeadersTooLarge, fmt.Sprintf("the request line and headers are larger than %d bytes", maxHeaderBytes), "")
			return
		}
		if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
			// The mux would redirect; the API has one spelling per endpoint.
			writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no such endpoint: %s (the API does not redirect: use %s)", r.URL.Path, clean), "")
			return
		}
		if _, pattern := s.mux.Handler(r); pattern == "" {
			s.noRoute(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// NewHTTPServer is the net/http server the lease API runs h in: its
// timeouts and header limit, for a store whose longest wait is maxWait.
// The lease API benchmark serves its trivial handler with it too, so that
// the reference pays the same per-request deadlines (decision 155).
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
	srv := NewHTTPServer(s.Handler(), s.store.cfg.MaxWait)
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

// Error codes of the API (docs/api.md).
const (
	codeInvalid                = "Invalid"
	codeRequestTooLarge        = "RequestTooLarge"
	codeHeadersTooLarge        = "HeadersTooLarge"
	codeRequestTimeout         = "RequestTimeout"
	codeTooManyLeases          = "TooManyLeases"
	codeUnauthorized           = "Unauthorized"
	codeForbidden              = "Forbidden"
	codeNotFound               = "NotFound"
	codeMethodNotAllowed       = "MethodNotAllowed"
	codeSuperseded             = "Superseded"
	codeRevoked                = "Revoked"
	codeNoneFree               = "NoneFree"
	codeCoolingDown            = "CoolingDown"
	codeRecovering             = "Recovering"
	codeNotLeader              = "NotLeader"
	codeUnavailable            = "Unavailable"
	codeAuthUnavailable        = "AuthUnavailable"
	codeCredentialsUnavailable = "CredentialsUnavailable"
	codeInternal               = "Internal"
)

func (s *Server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.leading.Load() {
			writeNotLeading(w)
			return
		}
		h(w, r)
	}
}

func writeNotLeading(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, codeNotLeader, "this replica is not the leader of the lease API: retry through the Service, which routes to the leader", "")
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	req, err := decodeAcquire(s.body(r, w))
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	req.Owner = user.Identity()
	if !s.authorize(w, r, user, Attributes{Verb: VerbCreate, Namespace: req.Namespace}) {
		return
	}
	l, err := s.acquireWithinHorizon(r.Context(), req)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	var creds *Credentials
	if s.credentials != nil {
		if creds, err = s.credentials(r.Context(), l.Proxy); err != nil {
			// A lease without the credentials it needs is useless: give it back.
			if relErr := s.store.ReleaseAs(req.Owner, l.ID, OutcomeError, ""); relErr != nil && !errors.Is(relErr, ErrUnknownLease) {
				klog.FromContext(r.Context()).Error(relErr, "Returning a lease whose credentials are unavailable", "proxy", l.Proxy.Key)
			}
			klog.FromContext(r.Context()).Error(err, "Proxy credentials unavailable", "proxy", l.Proxy.Key)
			writeError(w, http.StatusInternalServerError, codeCredentialsUnavailable,
				fmt.Sprintf("the credentials of proxy %s are unavailable; the lease was returned", l.Proxy.Key), "")
			return
		}
	}
	// Checked first: the arguments alone would allocate on every grant.
	if logger := klog.FromContext(r.Context()).V(4); logger.Enabled() {
		logger.Info("Lease granted", "proxy", l.Proxy.Key, "holder", l.Holder, "user", user.Name, "expiresAt", l.ExpiresAt)
	}
	w.Header().Set("Location", "/v1/leases/"+l.ID)
	writeJSON(w, http.StatusCreated, leaseWireFrom(l, creds))
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	ttl, err := decodeRenew(s.body(r, w))
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if !s.authorizeLease(w, r, user, VerbUpdate, id) {
		return
	}
	l, err := s.renewWithinHorizon(r.Context(), user.Identity(), id, ttl)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseWireFrom(l, nil))
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	q, err := decodeRelease(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorizeLease(w, r, user, VerbDelete, id) {
		return
	}
	if err := s.store.ReleaseAs(user.Identity(), id, q.outcome, q.domain); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	_, err := parseQuery(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if !s.authorizeLease(w, r, user, VerbGet, id) {
		return
	}
	l, err := s.store.GetAs(user.Identity(), id)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseWireFrom(l, nil))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	f, err := decodeList(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorize(w, r, user, Attributes{Verb: VerbList, Namespace: f.Namespace}) {
		return
	}
	leases, err := s.store.List(f)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	items := make([]wire.Lease, 0, len(leases))
	for _, l := range leases {
		items = append(items, leaseWireFrom(l, nil))
	}
	writeJSON(w, http.StatusOK, wire.List[wire.Lease]{Items: items})
}

func (s *Server) proxies(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	q, err := decodeProxies(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorize(w, r, user, Attributes{Verb: VerbList, Namespace: q.namespace}) {
		return
	}
	proxies := s.store.Proxies(q.namespace, q.selector)
	items := make([]wire.Proxy, 0, len(proxies))
	for _, p := range proxies {
		items = append(items, wire.Proxy{
			Namespace: p.Key.Namespace, Name: p.Key.Name, URL: p.URL, Labels: p.Labels,
			LatencyMillis: p.LatencyMillis, MaxLeases: p.MaxLeases, FreeLeases: p.FreeLeases,
		})
	}
	writeJSON(w, http.StatusOK, wire.List[wire.Proxy]{Items: items})
}

// acquireWithinHorizon acquires, extending the persisted horizon when the
// grant needs it, within the request's wait.
func (s *Server) acquireWithinHorizon(ctx context.Context, req AcquireRequest) (Lease, error) {
	// Without a wait there is nothing to count down: no clock read.
	var deadline time.Time
	if req.Wait > 0 {
		deadline = s.clock.Now().Add(req.Wait)
	}
	for {
		l, err := s.store.Acquire(ctx, req)
		need, beyond := s.beyondHorizon(ctx, l, err)
		if !beyond {
			return l, err
		}
		if err := s.horizon.ensure(ctx, need); err != nil {
			return Lease{}, err
		}
		if req.Wait > 0 {
			req.Wait = max(0, deadline.Sub(s.clock.Now()))
		}
	}
}

func (s *Server) renewWithinHorizon(ctx context.Context, owner, id string, ttl time.Duration) (Lease, error) {
	for {
		l, err := s.store.RenewAs(owner, id, ttl)
		need, beyond := s.beyondHorizon(ctx, l, err)
		if !beyond {
			return l, err
		}
		if err := s.horizon.ensure(ctx, need); err != nil {
			return Lease{}, err
		}
	}
}

// beyondHorizon is what to do with the answer of a grant or renewal: beyond
// is true when it was refused for the persisted horizon, which must first
// reach need; else the answer stands, and a granted lease keeps the horizon
// ahead of it.
func (s *Server) beyondHorizon(ctx context.Context, l Lease, err error) (need time.Time, beyond bool) {
	if s.horizon == nil {
		return time.Time{}, false
	}
	if err == nil {
		s.horizon.keepAhead(ctx, l.ExpiresAt)
		return time.Time{}, false
	}
	// Only a refusal reaches errors.As, whose target would escape to the heap.
	var horizonErr *HorizonError
	if !errors.As(err, &horizonErr) {
		return time.Time{}, false
	}
	return horizonErr.Need, true
}

// body is the request body within the size limit. A declared length
// beyond the limit is refused before anything is read, so that a client
// sending "Expect: 100-continue" gets no 100 Continue before its 413.
func (s *Server) body(r *http.Request, w http.ResponseWriter) io.Reader {
	if r.ContentLength > s.maxBody {
		return errReader{&http.MaxBytesError{Limit: s.maxBody}}
	}
	return http.MaxBytesReader(w, r.Body, s.maxBody)
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// noBody refuses a body on a call that takes none (DELETE and GET), looking
// no further than its declared length or first byte.
func noBody(r *http.Request) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength < 0 {
		// Chunked: look at the first byte. A declared length is refused
		// without reading (and without a 100 Continue).
		var b [1]byte
		if n, _ := io.ReadFull(r.Body, b[:]); n == 0 {
			return nil
		}
	}
	return &FieldError{Message: r.Method + " takes no request body (release takes outcome and domain as query parameters)"}
}

// bearerToken is the token of an "Authorization: Bearer" header, "" if none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (User, bool) {
	ctx := r.Context()
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ctx = WithClientAddr(ctx, host)
	}
	user, err := s.authn.Authenticate(ctx, bearerToken(r))
	switch {
	case errors.Is(err, ErrReviewBudget):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeAuthUnavailable, "too many new bearer tokens to review now; retry", "")
		return User{}, false
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator lease API"`)
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "a valid bearer token is required: "+err.Error(), "")
		return User{}, false
	case err != nil:
		klog.FromContext(r.Context()).Error(err, "Authenticating a lease API call")
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeAuthUnavailable, "authentication is unavailable; retry", "")
		return User{}, false
	}
	return user, true
}

// authorizeLease authorizes a call on one lease in the namespace of its
// proxy; an ID that is not one of ours (or is another owner's) is 404.
func (s *Server) authorizeLease(w http.ResponseWriter, r *http.Request, user User, verb, id string) bool {
	ns, err := s.store.leaseNamespaceAs(user.Identity(), id)
	if err != nil {
		s.writeStoreError(w, r, err)
		return false
	}
	return s.authorize(w, r, user, Attributes{Verb: verb, Namespace: ns})
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, user User, attrs Attributes) bool {
	allowed, reason, err := s.authz.Authorize(r.Context(), user, attrs)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Authorizing a lease API call", "user", user.Name, "verb", attrs.Verb, "namespace", attrs.Namespace)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeAuthUnavailable, "authorization is unavailable; retry", "")
		return false
	}
	if !allowed {
		where := "in namespace " + attrs.Namespace
		if attrs.Namespace == "" {
			where = "across all namespaces"
		}
		msg := fmt.Sprintf("user %q may not %s proxies/leases (crawl.proxyfleet.io) %s", user.Name, attrs.Verb, where)
		if reason != "" {
			msg += ": " + reason
		}
		writeError(w, http.StatusForbidden, codeForbidden, msg, "")
		return false
	}
	return true
}

// writeStoreError answers an error of a decoder or the store.
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		field       *FieldError
		tooLarge    *http.MaxBytesError
		readErr     *bodyReadError
		unavailable *UnavailableError
	)
	switch {
	case errors.As(err, &field):
		writeError(w, http.StatusBadRequest, codeInvalid, err.Error(), field.Field)
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeRequestTooLarge, fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit), "")
	case errors.As(err, &readErr) && readErr.timeout:
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, codeRequestTimeout, err.Error(), "")
	case errors.As(err, &readErr):
		writeError(w, http.StatusBadRequest, codeInvalid, err.Error(), "")
	case errors.Is(err, ErrTooManyLeases):
		writeError(w, http.StatusTooManyRequests, codeTooManyLeases, err.Error(), "")
	case errors.Is(err, ErrUnknownLease):
		writeError(w, http.StatusNotFound, codeNotFound, "no such lease: unknown, released or expired; acquire a new one", "")
	case errors.Is(err, ErrRevoked):
		writeError(w, http.StatusGone, codeRevoked, err.Error()+"; acquire a new one", "")
	case errors.Is(err, ErrSuperseded):
		writeError(w, http.StatusConflict, codeSuperseded, err.Error()+"; acquire a new one", "")
	case errors.As(err, &unavailable):
		setRetryAfter(w, unavailable.RetryAfter)
		code := codeNoneFree
		switch {
		case errors.Is(err, ErrCoolingDown):
			code = codeCoolingDown
		case errors.Is(err, ErrRecovering):
			code = codeRecovering
		}
		writeError(w, http.StatusServiceUnavailable, code, unavailable.Reason.Error(), "")
	case errors.Is(err, ErrNotLeader):
		writeError(w, http.StatusServiceUnavailable, codeNotLeader, err.Error(), "")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errHorizon):
		if errors.Is(err, errHorizon) {
			klog.FromContext(r.Context()).Error(err, "Extending the lease horizon")
		}
		setRetryAfter(w, time.Second)
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the lease API cannot answer now; retry", "")
	default:
		klog.FromContext(r.Context()).Error(err, "Lease API call failed", "method", r.Method, "path", r.URL.Path)
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error", "")
	}
}

// noRoute answers what the mux would answer with 404 or 405, in JSON.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path), "")
	case http.StatusNotFound:
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+r.URL.Path, "")
	default:
		// Anything else the mux would say (a redirect) is a 404 here too.
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+r.URL.Path, "")
	}
}

// cleanPath is the path net/http's mux would redirect to: no ".", "..",
// or doubled slashes.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// headBytes approximates the size of a request's head as net/http counts
// it: the request line and every header line.
func headBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + len(r.Host)
}

// headerRecorder keeps the status and headers of a response, not its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}
func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(d.Seconds())))))
}

// The JSON of the API is package wire's.

func leaseWireFrom(l Lease, creds *Credentials) wire.Lease {
	out := wire.Lease{
		ID:     l.ID,
		Holder: l.Holder,
		Proxy: wire.ProxyRef{
			Namespace: l.Proxy.Key.Namespace, Name: l.Proxy.Key.Name, URL: l.Proxy.URL, LatencyMillis: l.Proxy.LatencyMillis,
		},
		Session:   l.Session,
		Domain:    l.Domain,
		TTL:       l.TTL.String(),
		GrantedAt: l.GrantedAt.UTC(),
		ExpiresAt: l.ExpiresAt.UTC(),
	}
	if creds != nil {
		out.Credentials = &wire.Credentials{Username: creds.Username, Password: creds.Password}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// The client may be gone; there is nobody to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message, field string) {
	writeJSON(w, status, wire.Error{Error: wire.ErrorBody{Code: code, Message: message, Field: field}})
}
