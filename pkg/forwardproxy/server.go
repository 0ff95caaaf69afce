package forwardproxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Server is a forward proxy. Create it with [New]; serve with [Server.Serve]
// or mount it as an http.Handler (then MaxConns is not enforced and
// Shutdown/Close act only on the tunnels it opened).
type Server struct {
	cfg       Config
	log       klog.Logger
	srv       *http.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport

	egress  EgressPolicy
	metrics *serverMetrics

	auth     bool
	static   bool // Username and Password are set
	userHash [sha256.Size]byte
	passHash [sha256.Size]byte

	// leases is the book of lease credentials (nil without LeaseKeys);
	// keyIDs announces the keys (LeaseKeysHeader).
	leases *leaseBook
	keyIDs string

	conns atomic.Int64 // client connections accepted by Serve and not yet closed

	mu           sync.Mutex
	shuttingDown bool
	tunnels      map[*tunnel]struct{}
	tunnelWG     sync.WaitGroup
}

// Stats is a point-in-time view of a Server's load.
type Stats struct {
	// Conns counts open client connections accepted by Serve, tunnels
	// included.
	Conns int
	// Tunnels counts CONNECT requests being dialled or tunnelled.
	Tunnels int
}

// New validates cfg, applies defaults and returns a Server.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	egress, err := NewEgressPolicy(cfg.AllowCIDRs, cfg.DenyCIDRs)
	if err != nil {
		return nil, err
	}
	egress.Own = cfg.ExitRanges
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		egress:  egress,
		metrics: newServerMetrics(),
		tunnels: make(map[*tunnel]struct{}),
	}
	if s.cfg.DialContext == nil && len(cfg.ExitRanges) > 0 {
		s.cfg.DialContext = exitDialer(egress)
	}
	if s.cfg.DialContext == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second, Control: egress.control}
		if cfg.SourceAddr.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: cfg.SourceAddr.AsSlice()}
		}
		s.cfg.DialContext = d.DialContext
	}
	if cfg.Username != "" {
		s.auth, s.static = true, true
		s.userHash = sha256.Sum256([]byte(cfg.Username))
		s.passHash = sha256.Sum256([]byte(cfg.Password))
	}
	if len(cfg.LeaseKeys) > 0 {
		s.auth = true
		s.leases = newLeaseBook(s.metrics)
		s.keyIDs = leaseKeyIDs(cfg.LeaseKeys)
	}
	errorLog := log.New(logWriter{s.log.V(2)}, "", 0)
	s.transport = &http.Transport{
		Proxy:                 nil, // never chain through $HTTP_PROXY
		DialContext:           s.dial,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       cfg.IdleTimeout,
		ExpectContinueTimeout: time.Second,
		// Transparent: do not ask for gzip and decompress behind the
		// client's back.
		DisableCompression: true,
		// With exit ranges a pooled connection would carry another
		// session's requests from the wrong address.
		DisableKeepAlives: len(cfg.ExitRanges) > 0,
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      s.transport,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.forwardError,
		ErrorLog:       errorLog,
	}
	s.srv = &http.Server{
		Handler:                      s,
		ReadHeaderTimeout:            cfg.ReadHeaderTimeout,
		IdleTimeout:                  cfg.IdleTimeout,
		ErrorLog:                     errorLog,
		DisableGeneralOptionsHandler: true,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			tc, ok := c.(*trackedConn)
			if !ok {
				return ctx
			}
			if tc.overLimit {
				ctx = context.WithValue(ctx, overLimitKey{}, true)
			}
			return context.WithValue(ctx, connKey{}, tc)
		},
	}
	return s, nil
}

// Serve accepts connections on l until Shutdown or Close, and then returns
// http.ErrServerClosed. It enforces MaxConns.
func (s *Server) Serve(l net.Listener) error {
	return s.srv.Serve(&limitListener{Listener: l, s: s})
}

// Shutdown stops accepting connections, closes idle keep-alive connections,
// and waits for in-flight requests and open tunnels to finish. When ctx ends
// first, it closes whatever is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shuttingDown = true
	s.mu.Unlock()

	err := s.srv.Shutdown(ctx)

	tunnelsDone := make(chan struct{})
	go func() {
		s.tunnelWG.Wait()
		close(tunnelsDone)
	}()
	select {
	case <-tunnelsDone:
	case <-ctx.Done():
		s.closeTunnels()
		<-tunnelsDone
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		_ = s.srv.Close()
	}
	s.transport.CloseIdleConnections()
	return err
}

// Close closes listeners, connections and tunnels immediately.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shuttingDown = true
	s.mu.Unlock()
	err := s.srv.Close()
	s.closeTunnels()
	s.tunnelWG.Wait()
	s.transport.CloseIdleConnections()
	return err
}

// Stats returns the current load.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Conns: int(s.conns.Load()), Tunnels: len(s.tunnels)}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	over, _ := r.Context().Value(overLimitKey{}).(bool)
	if over {
		// One answer, then the connection goes: it is beyond the limit.
		w.Header().Set("Connection", "close")
	}
	if r.Method != http.MethodConnect && r.URL.Host == "" {
		s.serveDirect(w, r)
		return
	}
	if over {
		s.log.V(2).Info("Refusing request: connection limit reached", "method", r.Method, "target", r.URL.Host, "client", r.RemoteAddr, "maxConns", s.cfg.MaxConns)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "503 proxy connection limit reached", http.StatusServiceUnavailable)
		return
	}
	a, err := s.proxyUser(r)
	if err != nil {
		s.log.V(2).Info("Refusing request: bad username term", "method", r.Method, "target", r.URL.Host, "client", r.RemoteAddr, "err", err)
		if r.Method == http.MethodConnect {
			w.Header().Set("Connection", "close")
		}
		http.Error(w, "400 "+err.Error(), http.StatusBadRequest)
		return
	}
	if !a.ok {
		s.log.V(2).Info("Refusing request: proxy authentication missing or wrong", "method", r.Method, "target", r.URL.Host, "client", r.RemoteAddr, "lease", a.refused)
		w.Header().Set("Proxy-Authenticate", `Basic realm="`+Realm+`"`)
		if r.Method == http.MethodConnect {
			w.Header().Set("Connection", "close")
		}
		http.Error(w, "407 "+a.refusal(), http.StatusProxyAuthRequired)
		return
	}
	if a.lease != nil {
		if tc, _ := r.Context().Value(connKey{}).(*trackedConn); tc != nil {
			s.leases.attach(a.lease, tc)
		}
	}
	if a.session != "" || a.announce {
		ctx := r.Context()
		if a.session != "" {
			ctx = withSession(ctx, a.session)
		}
		if a.announce {
			ctx = context.WithValue(ctx, announceKey{}, true)
		}
		r = r.WithContext(ctx)
	}
	if r.Method == http.MethodConnect {
		s.serveConnect(w, r)
		return
	}
	s.serveForward(w, r)
}

// serveDirect answers requests addressed to the proxy itself.
func (s *Server) serveDirect(w http.ResponseWriter, r *http.Request) {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case get && r.URL.Path == "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
		return
	case get && r.URL.Path == MetricsPath:
		s.metrics.handler.ServeHTTP(w, r)
		return
	case r.Method == http.MethodPost && r.URL.Path == leasecred.PushPath:
		s.servePush(w, r)
		return
	}
	http.Error(w, "400 this is a forward proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port", http.StatusBadRequest)
}

// authn is what a request's credentials admit.
type authn struct {
	ok bool
	// session is the username's session id (SplitSession), "" for none.
	session string
	// lease is the lease a lease credential is of (nil for none, and for
	// the operator's own short credential).
	lease *leaseEntry
	// announce: the operator's own credentials (the static ones, or a
	// lease credential of no lease), whose answers name the lease keys.
	announce bool
	// refused says why a lease credential was refused, "" otherwise.
	refused admitReason
}

func (a authn) refusal() string {
	switch a.refused {
	case refusedExpired:
		return "proxy authentication required: the lease of these credentials has expired; renew it for fresh ones"
	case refusedEnded:
		return "proxy authentication required: the lease of these credentials has ended"
	case refusedFull:
		return "proxy authentication required: this proxy tracks too many leases now"
	}
	return "proxy authentication required"
}

// proxyUser reads the request's credentials. Without lease keys they are
// ok when they are the configured ones (always, when none are configured),
// with the session id of the username's session term (SplitSession); a
// configured username is matched whole first, so one that itself ends in a
// session term still works. With lease keys a lease credential admits its
// username, session term included, until its lease ends (leases.go); the
// static credentials then admit only the username itself, and nothing on
// a proxy with exit ranges (the operator probes those with a credential it
// signs): a session's exit is reached only with that session's credential.
// Digests and MACs are compared in constant time.
func (s *Server) proxyUser(r *http.Request) (authn, error) {
	user, pass, has := parseBasic(r.Header.Get("Proxy-Authorization"))
	if !has {
		return authn{ok: !s.auth}, nil
	}
	if s.leases != nil {
		if claims, err := leasecred.Verify(s.cfg.LeaseKeys, user, pass); err == nil {
			_, session, err := SplitSession(user)
			if err != nil {
				return authn{}, err
			}
			lease, refused := s.leases.admit(claims, time.Now())
			if refused != "" {
				s.metrics.leaseRefused.WithLabelValues(string(refused)).Inc()
				return authn{refused: refused}, nil
			}
			return authn{ok: true, session: session, lease: lease, announce: claims.Ref.IsZero()}, nil
		}
		if s.static && len(s.cfg.ExitRanges) == 0 && s.credentialsMatch(user, pass) {
			return authn{ok: true, announce: true}, nil
		}
		return authn{}, nil
	}
	if s.auth && s.credentialsMatch(user, pass) {
		return authn{ok: true}, nil
	}
	base, session, err := SplitSession(user)
	if err != nil {
		return authn{}, err
	}
	if !s.auth {
		return authn{ok: true, session: session}, nil
	}
	return authn{ok: session != "" && s.credentialsMatch(base, pass), session: session}, nil
}

func (s *Server) credentialsMatch(user, pass string) bool {
	uh := sha256.Sum256([]byte(user))
	ph := sha256.Sum256([]byte(pass))
	return subtle.ConstantTimeCompare(uh[:], s.userHash[:])&subtle.ConstantTimeCompare(ph[:], s.passHash[:]) == 1
}

// parseBasic parses an RFC 7617 "Basic" credential.
func parseBasic(h string) (user, pass string, ok bool) {
	const prefix = "basic "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// dial resolves a target, checks every address with the egress guard, and
// dials the admitted addresses in turn (as IP literals, so nothing resolves
// the name again between the check and the connection) within the dial
// timeout. A refusal is an *EgressRefusedError, a timeout a
// *dialTimeoutError.
func (s *Server) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	c, err := s.dialChecked(dctx, network, addr)
	if err != nil {
		var refused *EgressRefusedError
		if errors.As(err, &refused) {
			s.metrics.egressRefused.WithLabelValues(refused.Verdict.Rule).Inc()
			return nil, err
		}
		var ne net.Error
		if ctx.Err() == nil && (errors.Is(dctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
			return nil, &dialTimeoutError{addr: addr, timeout: s.cfg.DialTimeout, err: err}
		}
		return nil, err
	}
	return c, nil
}

func (s *Server) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = s.cfg.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if len(ips) == 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
		}
	}
	// Every address is checked before any is dialled: a name with one
	// internal address among public ones is refused, whichever the dial
	// would have picked.
	for _, ip := range ips {
		if v := s.egress.Check(ip); !v.Allowed {
			return nil, &EgressRefusedError{Host: host, Verdict: v}
		}
	}
	var seed ExitSeed
	if len(s.cfg.ExitRanges) > 0 {
		if ips = exitFamilies(ips, s.cfg.ExitRanges); len(ips) == 0 {
			return nil, &NoExitFamilyError{Host: host, Ranges: s.cfg.ExitRanges}
		}
		seed = exitSeedFor(ctx)
	}
	var errs []error
	for _, ip := range ips {
		dctx := ctx
		if src, ok := ExitAddr(s.cfg.ExitRanges, ip, seed); ok {
			dctx = context.WithValue(ctx, sourceKey{}, src)
		}
		c, err := s.cfg.DialContext(dctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, errors.Join(errs...)
}

// EgressRefusedError is a dial the egress guard refused.
type EgressRefusedError struct {
	// Host is the target's host as the client named it (a name or an IP).
	Host string
	// Verdict is the refusal of (the first refused address of) Host.
	Verdict EgressVerdict
}

func (e *EgressRefusedError) Error() string {
	if _, err := netip.ParseAddr(e.Host); err == nil {
		return "egress refused: " + e.Verdict.String()
	}
	return fmt.Sprintf("egress refused: %s resolves to %s", e.Host, e.Verdict)
}

type dialTimeoutError struct {
	addr    string
	timeout time.Duration
	err     error
}

func (e *dialTimeoutError) Error() string {
	return fmt.Sprintf("dial %s: timed out after %v: %v", e.addr, e.timeout, e.err)
}
func (e *dialTimeoutError) Unwrap() error { return e.err }
func (e *dialTimeoutError) Timeout() bool { return true }

// upstreamError writes the 403, 502 or 504 for an error reaching a target.
func upstreamError(w http.ResponseWriter, err error) int {
	var refused *EgressRefusedError
	if errors.As(err, &refused) {
		w.Header().Set("X-Egress-Rule", refused.Verdict.Rule)
		http.Error(w, "403 "+refused.Error()+"; forward-proxy --allow-cidr admits a range", http.StatusForbidden)
		return http.StatusForbidden
	}
	var nf *NoExitFamilyError
	if errors.As(err, &nf) {
		http.Error(w, "502 "+nf.Error(), http.StatusBadGateway)
		return http.StatusBadGateway
	}
	var te *dialTimeoutError
	if errors.As(err, &te) {
		http.Error(w, "504 timed out connecting to target", http.StatusGatewayTimeout)
		return http.StatusGatewayTimeout
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		http.Error(w, "502 cannot connect to target", http.StatusBadGateway)
		return http.StatusBadGateway
	}
	http.Error(w, "502 error talking to target", http.StatusBadGateway)
	return http.StatusBadGateway
}

type overLimitKey struct{}

// connKey holds a request's *trackedConn (connections accepted by Serve).
type connKey struct{}

// announceKey marks a request of the operator's own credentials, whose
// answer names the lease keys (LeaseKeysHeader).
type announceKey struct{}

// limitListener counts client connections and marks those beyond MaxConns.
type limitListener struct {
	net.Listener
	s *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.s.conns.Add(1)
	return &trackedConn{
		Conn:      c,
		s:         l.s,
		overLimit: l.s.cfg.MaxConns > 0 && n > int64(l.s.cfg.MaxConns),
	}, nil
}

// trackedConn decrements the connection count once, on Close, and leaves
// the lease it serves.
type trackedConn struct {
	net.Conn
	s         *Server
	overLimit bool
	once      sync.Once
	// lease is the lease the connection serves now (a tunnel, or the
	// latest request's), nil for none; guarded by the lease book's lock.
	lease      *leaseEntry
	leaseClose sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.conns.Add(-1)
		if c.s.leases != nil {
			c.s.leases.detach(c)
		}
	})
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when the underlying one can.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// logWriter adapts a logr verbosity level to a log.Logger (for net/http's
// own error messages).
type logWriter struct{ l klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Info("net/http", "msg", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
