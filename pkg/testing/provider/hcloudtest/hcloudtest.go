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
// the field. Tests inject faults through the embedded faultkit.Kit:
// FailNext, RateLimitNext (Hetzner's 429 with Retry-After), SetNoCapacity
// (resource_unavailable for a server type), LoseNextAnswers (the call
// takes effect and the connection drops before the answer), HoldAnswers
// and SetRandomFaults. WithBoot runs something for each server, such as
// faultkit.BootForwardProxy.
//
// Public addresses are loopback (WithPublicIP), so nothing leaves the host.
// It is not a simulation of Hetzner: no prices, volumes or networks.
package hcloudtest

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
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
}

// Common errors.
var (
	ErrServerError = Error{Status: 500, Code: "server_error", Message: "Error within the API backend"}
	ErrUnavailable = Error{Status: 503, Code: "unavailable", Message: "A service or product is currently not available"}
	ErrConflict    = Error{Status: 409, Code: "conflict", Message: "The resource has changed during the request, please retry"}
	ErrQuota       = Error{Status: 403, Code: "resource_limit_exceeded", Message: "server limit exceeded"}
	ErrCapacity    = Error{Status: 412, Code: "resource_unavailable", Message: "server type not available in this location"}
	ErrRateLimited = Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", Message: "limit of 3600 requests per hour reached"}
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
	boot     faultkit.BootFunc
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

// WithBoot runs boot when a server is created (from its user-data), and
// the halt it returns once the server is deleted.
func WithBoot(boot faultkit.BootFunc) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API, its faults those of the embedded kit, which
// serves it at URL (for hcloud.WithEndpoint). Its methods are safe for
// concurrent use.
type Fake struct {
	*faultkit.Kit[Op, Error]
	mu      sync.Mutex
	opts    options
	servers map[int64]*server
	// firewalls are the firewalls that exist (firewalls.go), by ID.
	firewalls map[int64]*firewall
	created   []Server // every server ever created, in order
	nextID    int64
}

type server struct {
	Server
	faultkit.Lag     // list answers that do not show it yet
	reads        int // reads that showed it in its current status
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{servers: map[int64]*server{}, firewalls: map[int64]*firewall{}}
	for _, o := range opts {
		o(&f.opts)
	}
	f.Kit = faultkit.New(t, f.routes(), faultkit.Cloud[Op, Error]{
		Write: write, RateLimited: ErrRateLimited, Random: randomFaults, Boot: f.opts.boot,
		Denied: func(*faultkit.Call[Op], faultkit.Denial) Error {
			return Error{Status: 401, Code: "unauthorized", Message: "unable to authenticate"}
		},
	})
	f.Grant(Token, faultkit.Credential{}) // a Hetzner token is its project's, Read & Write
	return f
}

// randomFaults are Hetzner's under load: its 5xx, a conflict, a 429 and
// lost answers (twice: the share they had when the storms were tuned),
// and resource_unavailable on creates.
func randomFaults(op Op) []faultkit.Fault[Error] {
	faults := []faultkit.Fault[Error]{
		faultkit.Error(ErrServerError), faultkit.Error(ErrUnavailable), faultkit.Error(ErrConflict), faultkit.Error(ErrRateLimited),
		{Lose: true}, {Lose: true},
	}
	if op == CreateServer {
		faults = append(faults, faultkit.Error(ErrCapacity))
	}
	return faults
}

// boot starts what s runs (WithBoot): its /64 is routed to it when it has
// one, as the boot script finds it (the on-link route).
func (f *Fake) boot(s *server) {
	var routed []string
	if s.IPv6Net != "" {
		routed = []string{s.IPv6Net}
	}
	f.Boot(strconv.FormatInt(s.ID, 10), faultkit.Boot{Name: s.Name, UserData: s.UserData, PublicIP: s.PublicIP, RoutedPrefixes: routed})
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
