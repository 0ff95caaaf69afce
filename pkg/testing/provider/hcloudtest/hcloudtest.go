// Package hcloudtest is an in-process fake of the part of the Hetzner Cloud
// API that pkg/provider/hetzner uses, served by net/http/httptest on
// 127.0.0.1 and spoken to by the real hcloud-go client (WithEndpoint): the
// servers' create, get, list (by name and label selector, paged) and
// delete, the firewalls' create, list and delete (firewalls.go), as JSON in the shapes of hcloud-go's schema package, with
// Hetzner's error bodies and rate-limit headers.
//
// It keeps state like Hetzner where the provider can tell: server names
// are unique in the project (uniqueness_error), servers go initializing →
// running and deleting → gone after the reads that show them (WithSteps),
// and a new server is missing from list answers for a while (WithListLag).
// Requests are validated (bearer token; server type, image and location
// known; label keys and values; user-data size) with invalid_input naming
// the field. Tests inject faults: FailNext, RateLimitNext (a 429 with
// Retry-After, and a count of the calls that came before it ran out),
// SetNoCapacity (resource_unavailable for a server type), LoseNextAnswers
// (the call takes effect and the connection drops before the answer), and
// SetRandomFaults. WithBoot runs something (a real forward proxy) for each
// server, as ec2test does.
//
// Public addresses are loopback (WithPublicIP), so nothing leaves the host.
// It is not a simulation of Hetzner: no prices, volumes or networks.
package hcloudtest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Token is the API token the fake accepts.
const Token = "hcloudtest-token-not-a-real-one"

// Defaults of a new Fake.
var (
	DefaultServerTypes = []string{"cx22", "cx32", "cpx11", "cax11"}
	DefaultImages      = []string{"debian-12", "ubuntu-24.04"}
	DefaultLocations   = []string{"fsn1", "nbg1", "hel1", "ash"}
)

// Op names an API operation.
type Op string

// The operations the fake serves.
const (
	CreateServer Op = "CreateServer"
	GetServer    Op = "GetServer"
	ListServers  Op = "ListServers"
	DeleteServer Op = "DeleteServer"
)

// Error is an error answer, as Hetzner sends it.
type Error struct {
	Status  int
	Code    string
	Message string
	// Fields name the request's invalid fields (invalid_input).
	Fields []string
	// RetryAfter, on a 429, is sent as Retry-After (whole seconds).
	RetryAfter time.Duration
}

// Common errors.
var (
	ErrServerError = Error{Status: 500, Code: "server_error", Message: "Error within the API backend"}
	ErrUnavailable = Error{Status: 503, Code: "unavailable", Message: "A service or product is currently not available"}
	ErrConflict    = Error{Status: 409, Code: "conflict", Message: "The resource has changed during the request, please retry"}
	ErrQuota       = Error{Status: 403, Code: "resource_limit_exceeded", Message: "server limit exceeded"}
	ErrCapacity    = Error{Status: 412, Code: "resource_unavailable", Message: "server type not available in this location"}
)

// Server is a snapshot of a server.
type Server struct {
	ID         int64
	Name       string
	Status     string // initializing, running, deleting
	ServerType string
	Location   string
	Image      string
	Labels     map[string]string
	UserData   string
	PublicIP   string
	IPv6       bool
	// IPv6Net is the server's /64 when IPv6 is on (public_net.ipv6.ip),
	// one per server from the documentation range.
	IPv6Net   string
	Firewalls []int64
	Created   time.Time
}

// Option configures a Fake.
type Option func(*options)

type options struct {
	steps    int
	listLag  int
	publicIP func(n int) string
	boot     func(Server) (halt func())
}

// WithSteps keeps a new server initializing, and a deleted one deleting,
// for the first n reads that show it.
func WithSteps(n int) Option { return func(o *options) { o.steps = n } }

// WithListLag hides a new server from the first n list answers that would
// show it: Hetzner's listing is eventually consistent.
func WithListLag(n int) Option { return func(o *options) { o.listLag = n } }

// WithPublicIP gives the nth server (from 1) its public IPv4 address.
// Default 127.0.101.n.
func WithPublicIP(ip func(n int) string) Option { return func(o *options) { o.publicIP = ip } }

// WithBoot runs boot when a server is created (the server as created, with
// its user-data), and the halt it returns once the server is deleted. boot
// must not block.
func WithBoot(boot func(Server) (halt func())) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API. Its methods are safe for concurrent use.
type Fake struct {
	// URL is the endpoint for hcloud.WithEndpoint.
	URL string

	mu      sync.Mutex
	opts    options
	servers map[int64]*server
	// firewalls are the firewalls that exist (firewalls.go), by ID.
	firewalls map[int64]*firewall
	created   []Server // every server ever created, in order
	nextID    int64
	calls     map[Op]int
	faults    map[Op][]Error
	lost      map[Op]int
	holds     map[Op]chan struct{}
	noCap     map[string]bool
	random    *rand.Rand
	rate      float64
	// A 429 with Retry-After (RateLimitNext): the time it named and how
	// many calls came before it.
	notBefore  time.Time
	earlyCalls int
}

type server struct {
	Server
	reads  int // reads that showed it in its current status
	listed int // list answers that would have shown it
	halt   func()
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{
		servers: map[int64]*server{}, firewalls: map[int64]*firewall{}, calls: map[Op]int{}, faults: map[Op][]Error{},
		lost: map[Op]int{}, holds: map[Op]chan struct{}{}, noCap: map[string]bool{},
	}
	for _, o := range opts {
		o(&f.opts)
	}
	srv := httptest.NewServer(f.routes())
	f.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range f.servers {
			if s.halt != nil {
				s.halt()
			}
		}
	})
	return f
}

// HoldAnswers makes the calls of op take effect and hold their answer
// until release is called or the client goes away (an operator killed
// mid-call).
func (f *Fake) HoldAnswers(op Op) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.holds[op] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.holds, op)
			close(ch)
		})
	}
}

// FailNext answers the next len(errs) calls of op with errs, before any effect.
func (f *Fake) FailNext(op Op, errs ...Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = append(f.faults[op], errs...)
}

// RateLimitNext answers the next call of op with a 429 whose Retry-After
// is retryAfter (whole seconds), and from then counts the calls of any
// operation that arrive before it ran out (EarlyCalls).
func (f *Fake) RateLimitNext(op Op, retryAfter time.Duration) {
	f.FailNext(op, Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", Message: "limit of 3600 requests per hour reached", RetryAfter: retryAfter})
}

// EarlyCalls is how many calls arrived before the Retry-After of the last
// 429 RateLimitNext made ran out.
func (f *Fake) EarlyCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.earlyCalls
}

// LoseNextAnswers makes the next n calls of op take effect and then drop
// the connection before answering.
func (f *Fake) LoseNextAnswers(op Op, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost[op] += n
}

// SetNoCapacity makes creates of serverType fail with resource_unavailable
// (or succeed again, none false).
func (f *Fake) SetNoCapacity(serverType string, none bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noCap[serverType] = none
}

// SetRandomFaults makes a share rate of all calls fail, drawn from seed:
// 429s (with a bucket that refills at once), server errors, unavailability
// and conflicts before any effect, capacity errors on creates, and lost
// answers after the effect. Rate 0 stops them.
func (f *Fake) SetRandomFaults(rate float64, seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rate, f.random = rate, rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// Calls is how many calls of op the fake received.
func (f *Fake) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Servers are the servers that exist (deleting ones too), by ID.
func (f *Fake) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Server, 0, len(f.servers))
	for _, id := range f.sortedIDs() {
		out = append(out, f.servers[id].snapshot())
	}
	return out
}

// Created is every server ever created, in order.
func (f *Fake) Created() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Server(nil), f.created...)
}

func (s *server) snapshot() Server {
	out := s.Server
	out.Labels = map[string]string{}
	for k, v := range s.Labels {
		out.Labels[k] = v
	}
	return out
}

// String leaves the user-data out: it holds the proxy's credentials.
func (s Server) String() string {
	return fmt.Sprintf("{ID:%d Name:%s Status:%s ServerType:%s Location:%s PublicIP:%s Labels:%v}",
		s.ID, s.Name, s.Status, s.ServerType, s.Location, s.PublicIP, s.Labels)
}

// Env is the environment that points the operator binary's hetzner
// provider at the fake (hetzner.EndpointEnv).
func (f *Fake) Env() []string { return []string{"HCLOUD_ENDPOINT=" + f.URL} }
