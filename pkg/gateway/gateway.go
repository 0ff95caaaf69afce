package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/bandetect"
	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Defaults of Config.
const (
	DefaultSessionIdle = 60 * time.Second
	// DefaultShutdownGrace is how long open tunnels may finish at shutdown.
	DefaultShutdownGrace = 10 * time.Second
	// DefaultDialTimeout bounds dialing an upstream proxy and its CONNECT answer.
	DefaultDialTimeout = 10 * time.Second
	// janitorInterval is how often leases are renewed and idle sessions ended.
	janitorInterval = time.Second
	// maxHolderLen is the lease API's bound on holder names.
	maxHolderLen = 253
)

// Realm is the Proxy-Authenticate realm of 407 answers.
const Realm = "proxy-operator gateway"

// Error reasons, the label of the errors metric and the Proxy-Status error details.
const (
	ReasonBadUsername     = "bad_username"
	ReasonBadRequest      = "bad_request"
	ReasonUnauthenticated = "unauthenticated"
	ReasonForbidden       = "forbidden"
	ReasonAuthUnavailable = "auth_unavailable"
	ReasonNotLeader       = "not_leader"
	ReasonNoneFree        = "none_free"
	ReasonDomainLimited   = "domain_limited"
	// ReasonSiteBanning: the target's site banned the bound's worth of the
	// namespace's proxies lately (docs/api.md, SiteBanning).
	ReasonSiteBanning     = "site_banning"
	ReasonUnavailable     = "unavailable"
	ReasonUpstreamRefused = "upstream_refused"
	ReasonUpstreamFailed  = "upstream_failed"
	// ReasonTargetCertificate: an inspected target's certificate did not
	// verify; nothing was sent to it.
	ReasonTargetCertificate = "target_certificate"
)

// ErrorReasons lists every reason, for pre-declared metrics.
var ErrorReasons = []string{ReasonBadUsername, ReasonBadRequest, ReasonUnauthenticated, ReasonForbidden,
	ReasonAuthUnavailable, ReasonNotLeader, ReasonNoneFree, ReasonDomainLimited, ReasonSiteBanning, ReasonUnavailable, ReasonUpstreamRefused, ReasonUpstreamFailed,
	ReasonTargetCertificate}

// Modes, the label of the connections metric.
const (
	ModeSession  = "session"
	ModeRotating = "rotating"
)

// Modes lists every mode, for pre-declared metrics.
var Modes = []string{ModeSession, ModeRotating}

// Directions of the bytes metric.
const (
	DirectionUp   = "up"   // client to upstream
	DirectionDown = "down" // upstream to client
)

// Directions lists both directions, for pre-declared metrics.
var Directions = []string{DirectionUp, DirectionDown}

// Metrics receives the gateway's measurements (pkg/metrics implements it).
type Metrics interface {
	// ObserveGatewayConnection counts a CONNECT tunnel or plain request that got an upstream.
	ObserveGatewayConnection(mode, method string)
	AddGatewayActive(delta int)
	// AddGatewayBytes counts bytes moved in one direction through a member
	// of pool in namespace (pool "" for a proxy of no pool): proxy
	// networks bill per GB.
	AddGatewayBytes(direction, namespace, pool string, n int64)
	SetGatewaySessions(n int)
	ObserveGatewayError(reason string)
}

// NoMetrics discards every measurement.
type NoMetrics struct{}

func (NoMetrics) ObserveGatewayConnection(string, string)       {}
func (NoMetrics) AddGatewayActive(int)                          {}
func (NoMetrics) AddGatewayBytes(string, string, string, int64) {}
func (NoMetrics) SetGatewaySessions(int)                        {}
func (NoMetrics) ObserveGatewayError(string)                    {}

// Config configures a Gateway.
type Config struct {
	// Leases is the lease API (Remote). Required.
	Leases Leases
	// Authenticator and Authorizer check callers as the lease API does
	// (auth.NewKubernetes, or auth.None). Required.
	Authenticator auth.Authenticator
	Authorizer    auth.Authorizer
	// AuthNone: the password is ignored (--lease-auth=none).
	AuthNone bool
	// Wait is how long a connection waits for a free proxy (--gateway-wait).
	Wait time.Duration
	// SessionIdle ends a session's lease after this long without a
	// connection (--gateway-session-idle). Default DefaultSessionIdle.
	SessionIdle time.Duration
	// TTL of the gateway's leases; 0: the store's default. Renewed at half.
	TTL time.Duration
	// Dial dials upstream proxies. Default: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds dialing an upstream and its CONNECT answer.
	DialTimeout time.Duration
	// ShutdownGrace is how long open tunnels may finish once Serve's
	// context ends. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Clock drives idleness and renewals. Default: the real clock.
	Clock clock.WithTicker
	// JanitorInterval is how often renewals and idle sessions are looked
	// at. Default one second.
	JanitorInterval time.Duration
	Metrics         Metrics
	// BanRules give the detector of a domain for a proxy's namespace (its
	// CrawlPolicies' banDetection); nil: every domain by bandetect.Default.
	BanRules *bandetect.Rules
	// Inspection, when set, gives the CAs of the namespaces that opted
	// into TLS inspection (inspect.go); nil: nothing is inspected.
	Inspection Minters
	// TargetRootCAs verify inspected targets' certificates. Default: the
	// system's roots.
	TargetRootCAs *x509.CertPool
	// InspectedPorts are the CONNECT ports inspected. Default 443.
	InspectedPorts []string
}

// Gateway is the forward proxy. It is an http.Handler; Serve runs it with
// its janitor.
type Gateway struct {
	cfg       Config
	transport *http.Transport

	mu        sync.Mutex
	sessions  map[sessionKey]*session
	rotating  map[*holding]struct{}
	tunnels   map[net.Conn]struct{}
	closed    bool
	tunnelsWG sync.WaitGroup
}

// New builds a gateway; it starts nothing.
func New(cfg Config) (*Gateway, error) {
	if cfg.Leases == nil || cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, errors.New("gateway: Leases, Authenticator and Authorizer are required")
	}
	if cfg.Wait < 0 || cfg.SessionIdle < 0 || cfg.TTL < 0 {
		return nil, errors.New("gateway: negative Wait, SessionIdle or TTL")
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.JanitorInterval == 0 {
		cfg.JanitorInterval = janitorInterval
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NoMetrics{}
	}
	if len(cfg.InspectedPorts) == 0 {
		cfg.InspectedPorts = []string{defaultInspectedPort}
	}
	g := &Gateway{
		cfg:      cfg,
		sessions: map[sessionKey]*session{},
		rotating: map[*holding]struct{}{},
		tunnels:  map[net.Conn]struct{}{},
	}
	g.transport = &http.Transport{
		Proxy:                 upstreamOf,
		DialContext:           cfg.Dial,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true, // pass bodies through as they come
		// Inspected targets: verified, never downgraded.
		TLSClientConfig:     &tls.Config{RootCAs: cfg.TargetRootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: cfg.DialTimeout,
	}
	return g, nil
}

// caller is an authenticated, authorized request's who and what.
type caller struct {
	user   auth.User
	target Target
}

// ServeHTTP answers CONNECT with a tunnel and absolute-form http:// requests
// by forwarding them, each through a leased upstream.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := g.admit(w, r)
	if !ok {
		return
	}
	if r.Method == http.MethodConnect {
		g.serveConnect(w, r, c)
		return
	}
	g.servePlain(w, r, c)
}

// admit reads Proxy-Authorization and checks the caller as the lease API
// checks acquire: create on proxies/leases in the ns term's namespace.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request) (caller, bool) {
	username, password, hasAuth := proxyBasicAuth(r.Header.Get("Proxy-Authorization"))
	if !hasAuth && r.Header.Get("Proxy-Authorization") != "" {
		g.challenge(w, r, "Proxy-Authorization must be Basic credentials: the username holds the terms, the password a bearer token")
		return caller{}, false
	}
	target, err := ParseUsername(username)
	if err != nil {
		g.fail(w, r, http.StatusBadRequest, ReasonBadUsername, err.Error(), 0)
		return caller{}, false
	}
	token := password
	if g.cfg.AuthNone {
		token = ""
	} else if !hasAuth {
		g.challenge(w, r, "credentials are required: the username holds the terms (ns-, pool-, session-), the password a bearer token")
		return caller{}, false
	}
	ctx := r.Context()
	user, err := g.cfg.Authenticator.Authenticate(auth.WithClientAddr(ctx, sourceAddr(r)), token)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		g.challenge(w, r, "the password must be a valid bearer token: "+err.Error())
		return caller{}, false
	case errors.Is(err, auth.ErrReviewBudget):
		// Expected under a flood of new tokens: not an error to log.
		g.fail(w, r, http.StatusServiceUnavailable, ReasonAuthUnavailable, "too many new bearer tokens to review now (from this address, or from all); retry", time.Second)
		return caller{}, false
	case err != nil:
		klog.FromContext(ctx).Error(err, "Authenticating a gateway connection")
		g.fail(w, r, http.StatusServiceUnavailable, ReasonAuthUnavailable, "authentication is unavailable; retry", time.Second)
		return caller{}, false
	}
	allowed, reason, err := g.cfg.Authorizer.Authorize(ctx, user, auth.Attributes{Verb: auth.VerbCreate, Namespace: target.Namespace})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Authorizing a gateway connection", "user", user.Name)
		g.fail(w, r, http.StatusServiceUnavailable, ReasonAuthUnavailable, "authorization is unavailable; retry", time.Second)
		return caller{}, false
	}
	if !allowed {
		where := "in namespace " + target.Namespace
		if target.Namespace == "" {
			where = "across all namespaces (add an ns- term to the username)"
		}
		msg := fmt.Sprintf("user %q may not create proxies/leases (crawl.proxyfleet.io) %s", user.Name, where)
		if reason != "" {
			msg += ": " + reason
		}
		g.fail(w, r, http.StatusForbidden, ReasonForbidden, msg, 0)
		return caller{}, false
	}
	return caller{user: user, target: target}, true
}

// sourceAddr is the caller's address for the TokenReview budget: the TCP
// peer's host, as net/http sets RemoteAddr from the accepted connection.
// Never a header (X-Forwarded-For, Forwarded): a client writes those, and
// could then spend another address's share or get a fresh one per request
// (docs/decisions/0221-gateway-review-budget-per-source-address.md).
func sourceAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// proxyBasicAuth decodes "Basic base64(user:password)".
func proxyBasicAuth(h string) (username, password string, ok bool) {
	scheme, encoded, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", "", false
	}
	username, password, ok = strings.Cut(string(raw), ":")
	return username, password, ok
}

// challenge answers 407 with Proxy-Authenticate.
func (g *Gateway) challenge(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("Proxy-Authenticate", `Basic realm="`+Realm+`"`)
	g.fail(w, r, http.StatusProxyAuthRequired, ReasonUnauthenticated, msg, 0)
}

// fail answers an error in plain text, the reason also in Proxy-Status
// (RFC 9209) so that a client that drops CONNECT bodies can still tell.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, status int, reason, msg string, retryAfter time.Duration) {
	g.cfg.Metrics.ObserveGatewayError(reason)
	klog.FromContext(r.Context()).V(3).Info("Gateway refused a request", "method", r.Method, "target", r.Host, "client", r.RemoteAddr, "status", status, "reason", reason, "message", msg)
	h := w.Header()
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(max(1, (retryAfter+time.Second-1)/time.Second))))
	}
	h.Set("Proxy-Status", fmt.Sprintf("proxy-operator-gateway; error=%s; details=%s", proxyStatusError(status), strconv.Quote(reason)))
	h.Set(HeaderError, reason)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodConnect {
		h.Set("Connection", "close")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, "%d %s: %s\n", status, http.StatusText(status), msg)
}

func proxyStatusError(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "http_request_error"
	case http.StatusProxyAuthRequired, http.StatusForbidden, http.StatusTooManyRequests:
		return "http_request_denied"
	case http.StatusServiceUnavailable:
		return "proxy_internal_error"
	default:
		return "destination_unavailable"
	}
}

// holderName names the gateway's leases after the caller, so that
// GET /v1/leases shows whose they are.
func holderName(c caller) string {
	name := "gateway:" + c.user.Name
	if c.target.Session != "" {
		name += ":" + c.target.Session
	}
	if len(name) > maxHolderLen {
		name = name[:maxHolderLen]
	}
	return strings.ToValidUTF8(name, "")
}

// domainOf is the lease's domain: the target host without its port.
func domainOf(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return hostrule.NormalizeDomain(strings.Trim(host, "[]"))
}

// selectorString is s as the lease API reads it: "" for everything.
func selectorString(s labels.Selector) string {
	if s == nil || s.Empty() {
		return ""
	}
	return s.String()
}

// acquire takes a lease for one connection or a session's first.
func (g *Gateway) acquire(ctx context.Context, c caller, domain string) (*holding, error) {
	l, creds, err := g.cfg.Leases.Acquire(ctx, c.user, client.AcquireRequest{
		Holder:    holderName(c),
		Namespace: c.target.Namespace,
		Selector:  selectorString(c.target.Selector()),
		TTL:       g.cfg.TTL,
		Domain:    domain,
		Session:   c.target.Session,
		Wait:      g.cfg.Wait,
		Country:   c.target.Country,
	})
	if err != nil {
		return nil, err
	}
	h, err := newHolding(c.user, l, creds)
	if err != nil {
		_ = g.cfg.Leases.Release(ctx, c.user, l.ID, client.OutcomeError, "", 0)
		return nil, fmt.Errorf("proxy %s/%s has an unusable URL: %w", l.Proxy.Namespace, l.Proxy.Name, err)
	}
	return h, nil
}

// use is a connection's hold on an upstream: done gives it back (rotating)
// or marks the session idle-able; refused drops it after the upstream
// refused, and banned after a response judged a ban for domain, so that
// the next try gets another.
type use struct {
	h       *holding
	mode    string
	done    func()
	refused func()
	banned  func(domain string)
}

// take finds the upstream for a connection: the session's, or a new lease.
func (g *Gateway) take(ctx context.Context, c caller, domain string) (*use, error) {
	if c.target.Session == "" {
		h, err := g.acquire(ctx, c, domain)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.rotating[h] = struct{}{}
		g.mu.Unlock()
		drop := func(outcome client.Outcome, domain string) {
			g.mu.Lock()
			delete(g.rotating, h)
			g.mu.Unlock()
			h.release(context.WithoutCancel(ctx), g.cfg.Leases, outcome, domain, klog.FromContext(ctx))
		}
		return &use{
			h: h, mode: ModeRotating,
			done:    func() { drop(client.OutcomeOK, "") },
			refused: func() { drop(client.OutcomeError, "") },
			banned:  func(domain string) { drop(client.OutcomeBanned, domain) },
		}, nil
	}

	key := sessionKeyOf(c)
	g.mu.Lock()
	s := g.sessions[key]
	if s == nil {
		s = &session{}
		g.sessions[key] = s
		g.cfg.Metrics.SetGatewaySessions(len(g.sessions))
	}
	// Counted as active before the lookup, so that the janitor does not end
	// a session whose connection is still acquiring.
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	g.mu.Unlock()

	s.acquiring.Lock()
	s.mu.Lock()
	h := s.held
	s.mu.Unlock()
	if h == nil || !h.live(ctx, g.cfg.Leases, g.cfg.Clock.Now()) {
		var err error
		if h, err = g.acquire(ctx, c, domain); err != nil {
			s.acquiring.Unlock()
			g.leaveSession(s)
			return nil, err
		}
		s.mu.Lock()
		s.held = h
		s.mu.Unlock()
	}
	s.acquiring.Unlock()
	// A refusal or a ban moves the session: the lease may be shared with
	// other replicas, so the session call ends it for all of them, and
	// the store's sticky choice goes with it.
	move := func(outcome client.Outcome, domain string) {
		s.mu.Lock()
		if s.held == h {
			s.held = nil
		}
		s.mu.Unlock()
		h.drop(context.WithoutCancel(ctx), g.cfg.Leases, klog.FromContext(ctx))
		if err := g.cfg.Leases.ReleaseSession(context.WithoutCancel(ctx), c.user, c.target.Namespace, c.target.Session, outcome, domain); err != nil {
			klog.FromContext(ctx).Error(err, "Releasing a session to move it to another upstream", "session", c.target.Session, "proxy", h.proxy, "outcome", outcome)
		}
		g.leaveSession(s)
	}
	return &use{
		h:       h,
		mode:    ModeSession,
		done:    func() { h.okRequests.Add(1); g.leaveSession(s) },
		refused: func() { move(client.OutcomeError, "") },
		banned:  func(domain string) { move(client.OutcomeBanned, domain) },
	}, nil
}

func (g *Gateway) leaveSession(s *session) {
	s.mu.Lock()
	s.active--
	s.lastUsed = g.cfg.Clock.Now()
	s.mu.Unlock()
}

// domainLimited is the reason of a DomainLimited answer, in the gateway's
// words: the API's own words add advice for its direct callers (acquire with
// wait) that a gateway client cannot follow.
const domainLimited = "the crawl policy's budget for this domain is used up"

// acquireError answers a failed acquire: the lease API's answer, by its
// code, or no leader.
func (g *Gateway) acquireError(w http.ResponseWriter, r *http.Request, err error) {
	apiErr := apiError(err)
	switch {
	case errors.Is(err, client.ErrNotLeader):
		g.fail(w, r, http.StatusServiceUnavailable, ReasonNotLeader, "no lease API leader answered (a failover, or this replica is not the leader): retry", time.Second)
	case apiErr != nil && apiErr.Code == wire.CodeSiteBanning:
		// The site refuses the fleet: no proxy is sent to it until
		// Retry-After, so that it burns no more IPs. The API's words name
		// the site, the count and the window.
		g.fail(w, r, http.StatusTooManyRequests, ReasonSiteBanning, apiErr.Message, apiErr.RetryAfter)
	case apiErr != nil && apiErr.Code == wire.CodeDomainLimited:
		g.fail(w, r, http.StatusTooManyRequests, ReasonDomainLimited, domainLimited, apiErr.RetryAfter)
	case apiErr != nil && (apiErr.Code == wire.CodeNoneFree || apiErr.Code == wire.CodeCoolingDown || apiErr.Code == wire.CodeRecovering):
		// In the API's words: they may say more (the country asked for).
		g.fail(w, r, http.StatusServiceUnavailable, ReasonNoneFree, apiErr.Message, apiErr.RetryAfter)
	case apiErr != nil && apiErr.StatusCode == http.StatusBadRequest:
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, apiErr.Message, 0)
	case errors.Is(err, context.Canceled):
		g.cfg.Metrics.ObserveGatewayError(ReasonUnavailable) // the client left while waiting
	default:
		klog.FromContext(r.Context()).Error(err, "Gateway acquire failed")
		g.fail(w, r, http.StatusServiceUnavailable, ReasonUnavailable, "no upstream can be leased now; retry", time.Second)
	}
}

// Sessions returns how many sessions the gateway remembers (for tests and
// the metric).
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}
