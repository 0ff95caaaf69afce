// Package client is a Go client of proxy-operator's lease API (docs/api.md):
// acquire a lease on a Ready proxy, renew it, release it with an outcome,
// inspect leases and discover proxies. Hold wraps the whole cycle around a
// function.
//
// It depends on the standard library (and package wire, the API's JSON,
// which does too) only, so crawlers can use it without
// pulling in client-go. It is not a retry policy: a 503 comes back as an
// *Error with RetryAfter, and the caller decides (or asks Acquire to wait).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// TokenFunc returns the bearer token for a call; "" sends none.
type TokenFunc func(ctx context.Context) (string, error)

// TokenFile reads the token from a file at every call, so that a rotated
// projected ServiceAccount token is picked up.
func TokenFile(path string) TokenFunc {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("lease API token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// Client calls one lease API endpoint. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	http  *http.Client
	token TokenFunc
	// actFor holds the act-for headers of ActingFor, nil for none.
	actFor http.Header
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: one with a 90 s timeout,
// above the API's longest wait).
func WithHTTPClient(c *http.Client) Option { return func(cl *Client) { cl.http = c } }

// WithToken sets where the bearer token comes from.
func WithToken(f TokenFunc) Option { return func(cl *Client) { cl.token = f } }

// New returns a client of the lease API at baseURL, such as
// http://proxy-operator-lease.crawl-system:8080.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("lease API URL %q: want http(s)://host[:port][/path]", baseURL)
	}
	c := &Client{base: u, http: &http.Client{Timeout: 90 * time.Second}}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// ActingFor returns a client whose calls are made as user (name, UID and
// groups as a TokenReview found them). The server refuses them unless this
// client's own token may act-for on callers.gateway.crawl.proxyfleet.io:
// it is the gateway tier's door, not a crawler's.
func (c *Client) ActingFor(name, uid string, groups []string) *Client {
	h := http.Header{}
	h.Set(wire.HeaderActForUser, name)
	if uid != "" {
		h.Set(wire.HeaderActForUID, uid)
	}
	for _, g := range groups {
		h.Add(wire.HeaderActForGroup, g)
	}
	cp := *c
	cp.actFor = h
	return &cp
}

// AcquireRequest asks for a lease; zero fields take the server's defaults.
type AcquireRequest struct {
	// Holder names this worker. Required.
	Holder string
	// Namespace restricts the proxies to one namespace.
	Namespace string
	// Selector is a label selector such as "region=eu,tier!=slow".
	Selector string
	// TTL is the lease's lifetime until renewed.
	TTL time.Duration
	// Domain skips proxies cooling down for it (after a banned release).
	Domain string
	// Session asks for the same proxy as the session's previous lease.
	Session string
	// Wait long-polls this long for capacity before answering 503.
	Wait time.Duration
	// Country asks for a proxy whose measured exit country is this ISO
	// 3166-1 alpha-2 code ("DE").
	Country string
}

// Lease is a granted lease.
type Lease struct {
	// ID names the lease in Renew and Release. A renewal returns a new ID;
	// use the latest (older ones stop working when the leader changes).
	ID     string
	Holder string
	Proxy  LeasedProxy
	// Credentials are set by Acquire when the proxy requires basic auth,
	// and by Renew when they are the lease's own (the proxy checks lease
	// credentials: they admit only while the lease lives, until the end
	// they were signed for). Within Hold, use ProxyURL or ProxyFunc: they
	// follow the renewals.
	Credentials *Credentials
	Session     string
	Domain      string
	// State is what PutState kept for this proxy and domain (a cookie
	// jar, say), set by Acquire when there is some.
	State     []byte
	TTL       time.Duration
	GrantedAt time.Time
	ExpiresAt time.Time

	// latest holds the credentials of the latest renewal, shared by the
	// copies of the Lease that Hold hands out; nil outside Hold.
	latest *latestCredentials
}

// latestCredentials are a held lease's current credentials.
type latestCredentials struct {
	mu    sync.Mutex
	creds *Credentials
}

func (c *latestCredentials) get() *Credentials {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creds
}

func (c *latestCredentials) set(creds *Credentials) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.creds = creds
}

// LeasedProxy is the proxy a lease holds.
type LeasedProxy struct {
	Namespace     string
	Name          string
	URL           string
	LatencyMillis int64
	// Pool is the ProxyPool the proxy is a member of, "" if none.
	Pool string
}

// Credentials are the proxy's basic-auth credentials.
type Credentials struct {
	Username string
	Password string
}

// ProxyURL is the proxy's URL with the lease's latest credentials in it
// (within Hold, those of its latest renewal), ready for
// http.Transport.Proxy.
func (l *Lease) ProxyURL() (*url.URL, error) {
	u, err := url.Parse(l.Proxy.URL)
	if err != nil {
		return nil, fmt.Errorf("proxy URL of lease: %w", err)
	}
	creds := l.Credentials
	if l.latest != nil {
		creds = l.latest.get()
	}
	if creds != nil {
		u.User = url.UserPassword(creds.Username, creds.Password)
	}
	return u, nil
}

// ProxyFunc is an http.Transport's Proxy that sends every new connection
// through the lease's proxy with its latest credentials: a Transport built
// once in a Hold function keeps working across the lease's renewals
// (connections opened earlier live as long as the lease).
func (l *Lease) ProxyFunc() func(*http.Request) (*url.URL, error) {
	return func(*http.Request) (*url.URL, error) { return l.ProxyURL() }
}

// Proxy is a Ready proxy as discovery lists it.
type Proxy = wire.Proxy

// Outcome is how a holder's use of a proxy went.
type Outcome string

const (
	OutcomeOK     Outcome = "ok"
	OutcomeBanned Outcome = "banned"
	OutcomeError  Outcome = "error"
)

// LeasesFilter narrows Leases; empty fields match everything.
type LeasesFilter struct {
	Holder    string
	Namespace string
}

// Acquire asks for a lease.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	body := wire.AcquireRequest{Holder: req.Holder, Namespace: req.Namespace, Selector: req.Selector,
		TTL: durationString(req.TTL), Domain: req.Domain, Session: req.Session, Wait: durationString(req.Wait), Country: req.Country}
	var out wire.Lease
	if err := c.do(ctx, http.MethodPost, "/v1/leases", nil, body, http.StatusCreated, &out); err != nil {
		return nil, err
	}
	return leaseFrom(out)
}

// Renew extends a lease by ttl from now (0: its TTL) and returns it with its
// new ID.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (*Lease, error) {
	return c.RenewReporting(ctx, id, ttl, Report{})
}

// Report is what a holder tells of a lease it keeps, since its last
// report: counted for the proxy's pool (status.usage) and the rule of the
// lease's domain.
type Report struct {
	// OKRequests went well on the lease (ok outcomes).
	OKRequests int64
	// TransferredBytes moved through the proxy (transferredGiB).
	TransferredBytes int64
}

// RenewReporting renews as Renew does and sends a report.
func (c *Client) RenewReporting(ctx context.Context, id string, ttl time.Duration, r Report) (*Lease, error) {
	body := wire.RenewRequest{TTL: durationString(ttl)}
	if r.OKRequests > 0 {
		body.OKRequests = strconv.FormatInt(r.OKRequests, 10)
	}
	if r.TransferredBytes > 0 {
		body.TransferredBytes = strconv.FormatInt(r.TransferredBytes, 10)
	}
	var out wire.Lease
	if err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/renew", nil, body, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return leaseFrom(out)
}

// PutState keeps state (at most 64 KiB; empty drops it) for the lease's
// proxy and domain: the next Acquire by the same identity that gets this
// proxy for this domain receives it in Lease.State; other identities never
// do. The identity's ban for the domain, or a new instance of the proxy,
// drops it.
func (c *Client) PutState(ctx context.Context, id string, state []byte) error {
	return c.do(ctx, http.MethodPut, "/v1/leases/"+url.PathEscape(id)+"/state", nil, state, http.StatusNoContent, nil)
}

// Release ends a lease. OutcomeBanned makes the proxy cool down for domain
// ("" : the domain the lease was acquired with).
func (c *Client) Release(ctx context.Context, id string, outcome Outcome, domain string) error {
	return c.ReleaseTransferred(ctx, id, outcome, domain, 0)
}

// ReleaseTransferred releases as Release does and reports the bytes moved
// through the lease's proxy since the last report (0: none).
func (c *Client) ReleaseTransferred(ctx context.Context, id string, outcome Outcome, domain string, transferred int64) error {
	q := url.Values{}
	if outcome != "" {
		q.Set("outcome", string(outcome))
	}
	if domain != "" {
		q.Set("domain", domain)
	}
	if transferred > 0 {
		q.Set("transferredBytes", strconv.FormatInt(transferred, 10))
	}
	return c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(id), q, nil, http.StatusNoContent, nil)
}

// Lease returns one live lease.
func (c *Client) Lease(ctx context.Context, id string) (*Lease, error) {
	var out wire.Lease
	if err := c.do(ctx, http.MethodGet, "/v1/leases/"+url.PathEscape(id), nil, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return leaseFrom(out)
}

// Leases lists the live leases that match f.
func (c *Client) Leases(ctx context.Context, f LeasesFilter) ([]Lease, error) {
	q := url.Values{}
	if f.Holder != "" {
		q.Set("holder", f.Holder)
	}
	if f.Namespace != "" {
		q.Set("namespace", f.Namespace)
	}
	var out wire.List[wire.Lease]
	if err := c.do(ctx, http.MethodGet, "/v1/leases", q, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	leases := make([]Lease, 0, len(out.Items))
	for _, item := range out.Items {
		l, err := leaseFrom(item)
		if err != nil {
			return nil, err
		}
		leases = append(leases, *l)
	}
	return leases, nil
}

// Proxies lists the Ready proxies in namespace ("" : all) that match the
// label selector ("" : all).
func (c *Client) Proxies(ctx context.Context, namespace, selector string) ([]Proxy, error) {
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	if selector != "" {
		q.Set("selector", selector)
	}
	var out wire.List[Proxy]
	if err := c.do(ctx, http.MethodGet, "/v1/proxies", q, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Ready asks whether this endpoint leads the lease API (GET /readyz): nil
// when it does, an *Error with code NotLeader when it is a standby.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, http.StatusOK, nil)
}

// do makes one call and decodes a response with status want into out, or
// an error response into *Error. path is already escaped.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in any, want int, out any) error {
	target := strings.TrimSuffix(c.base.String(), "/") + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var (
		body        io.Reader
		contentType string
	)
	switch v := in.(type) {
	case nil:
	case []byte: // session state: sent as it is
		body, contentType = bytes.NewReader(v), "application/octet-stream"
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("lease API %s %s: %w", method, path, err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("lease API %s: %w", method, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range c.actFor {
		req.Header[k] = v
	}
	if c.token != nil {
		token, err := c.token(ctx)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("lease API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return decodeError(resp)
	}
	// Read to the end, so that the connection goes back to the pool.
	defer func() { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) }()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("lease API %s %s: decoding the response: %w", method, path, err)
	}
	return nil
}

// Error is an error answer of the API.
type Error struct {
	StatusCode int
	// Code is the API's error code, such as NoneFree or Revoked (docs/api.md).
	Code    string
	Message string
	// Field names the offending request field of a 400.
	Field string
	// RetryAfter is the server's hint on a 503.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("lease API: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Sentinels for errors.Is on an *Error.
var (
	// ErrLeaseLost: the lease is gone (404 NotFound, 409 Superseded, 410
	// Revoked): stop using the proxy and acquire another.
	ErrLeaseLost = errors.New("lease lost")
	// ErrUnavailable: a 503 (nothing free, cooling down, recovering, not the
	// leader); RetryAfter says when to try again.
	ErrUnavailable = errors.New("lease API unavailable")
	// ErrNotLeader: a 503 NotLeader, the answer of a standby replica: the
	// same call may succeed on another replica's URL at once.
	ErrNotLeader = errors.New("not the lease API leader")
)

// Is matches ErrLeaseLost, ErrUnavailable and ErrNotLeader.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotLeader:
		return e.Code == wire.CodeNotLeader
	case ErrLeaseLost:
		return e.StatusCode == http.StatusNotFound || e.StatusCode == http.StatusConflict || e.StatusCode == http.StatusGone
	case ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	}
	return false
}

func decodeError(resp *http.Response) error {
	e := &Error{StatusCode: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var body wire.Error
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(raw, &body); err != nil || body.Error.Code == "" {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 512)]))
		return e
	}
	e.Code, e.Message, e.Field = body.Error.Code, body.Error.Message, body.Error.Field
	return e
}

// leaseFrom converts the API's lease.
func leaseFrom(j wire.Lease) (*Lease, error) {
	ttl, err := time.ParseDuration(j.TTL)
	if err != nil {
		return nil, fmt.Errorf("lease API: lease ttl %q: %w", j.TTL, err)
	}
	l := &Lease{
		ID:        j.ID,
		Holder:    j.Holder,
		Proxy:     LeasedProxy{Namespace: j.Proxy.Namespace, Name: j.Proxy.Name, URL: j.Proxy.URL, LatencyMillis: j.Proxy.LatencyMillis, Pool: j.Proxy.Pool},
		Session:   j.Session,
		Domain:    j.Domain,
		State:     j.State,
		TTL:       ttl,
		GrantedAt: j.GrantedAt,
		ExpiresAt: j.ExpiresAt,
	}
	if j.Credentials != nil {
		l.Credentials = &Credentials{Username: j.Credentials.Username, Password: j.Credentials.Password}
	}
	return l, nil
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
