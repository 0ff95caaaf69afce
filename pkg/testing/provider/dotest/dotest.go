// Package dotest is an in-process fake of the part of the DigitalOcean API
// that pkg/provider/digitalocean uses, served by net/http/httptest on
// 127.0.0.1 and spoken to by the real godo client (SetBaseURL): droplets'
// create, get, list by tag (paged) and delete, tags' create, and cloud
// firewalls' create, list and delete (firewalls.go), as JSON in godo's shapes,
// with DigitalOcean's error bodies ({"id","message","request_id"}) and
// rate-limit headers.
//
// It keeps state like DigitalOcean where the provider can tell: droplet
// names are not unique (a second create makes a second droplet), droplets
// go new → active after the reads that show them (WithSteps), and a new
// droplet is missing from list-by-tag answers for a while (WithListLag).
// Every call needs a scope of its token (Scopes, WithScopes): a call
// without it is refused 403, as a custom-scoped token is, and
// UsedPermissions tells which the provider needed. Requests are validated
// (size, image and region known; tag syntax; user-data size) with a 422
// naming the field. Tests inject faults through the embedded
// faultkit.Kit: FailNext, RateLimitNext (DigitalOcean's 429 with
// Retry-After), SetNoCapacity (422 "size is not available in this region"
// for a size), LoseNextAnswers (the call takes effect and the connection
// drops before the answer), HoldAnswers and SetRandomFaults. WithBoot runs
// something for each droplet, such as faultkit.BootForwardProxy.
//
// Public addresses are loopback (WithPublicIP), so nothing leaves the host.
package dotest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// Token is the API token the fake accepts.
const Token = "dotest-token-not-a-real-one"

// Scopes are the custom scopes the fake grants Token unless WithScopes
// says otherwise: the ones docs/digitalocean.md documents.
var Scopes = []string{"droplet:create", "droplet:read", "droplet:delete", "tag:create", "tag:read",
	"regions:read", "sizes:read", "actions:read", "image:read"}

// FirewallScopes are the scopes spec.digitalocean.allowFrom's firewall
// needs besides Scopes (docs/digitalocean.md); tests that use it grant
// them with WithScopes.
var FirewallScopes = []string{"firewall:create", "firewall:read", "firewall:delete"}

// Defaults of a new Fake.
var (
	DefaultSizes   = []string{"s-1vcpu-512mb-10gb", "s-1vcpu-1gb", "s-2vcpu-2gb"}
	DefaultImages  = []string{"debian-12-x64", "ubuntu-24-04-x64"}
	DefaultRegions = []string{"nyc3", "ams3", "fra1", "sgp1"}
)

// Op names an API operation.
type Op string

// The operations the fake serves.
const (
	CreateDroplet Op = "CreateDroplet"
	GetDroplet    Op = "GetDroplet"
	ListDroplets  Op = "ListDroplets"
	DeleteDroplet Op = "DeleteDroplet"
)

// Error is an error answer, as DigitalOcean sends it.
type Error struct {
	Status  int
	ID      string
	Message string
}

// Common errors, with DigitalOcean's ids and messages.
var (
	ErrServerError = Error{Status: 500, ID: "server_error", Message: "Server was unable to give you a response."}
	ErrUnavailable = Error{Status: 503, ID: "service_unavailable", Message: "The service is temporarily unavailable."}
	ErrQuota       = Error{Status: 422, ID: "unprocessable_entity", Message: "creating this/these droplet(s) will exceed your droplet limit"}
	ErrCapacity    = Error{Status: 422, ID: "unprocessable_entity", Message: "Size is not available in this region."}
	ErrRateLimited = Error{Status: http.StatusTooManyRequests, ID: "too_many_requests", Message: "API Rate limit exceeded."}
)

// Droplet is a snapshot of a droplet.
type Droplet struct {
	ID       int
	Name     string
	Status   string // new, active
	Size     string
	Region   string
	Image    string
	Tags     []string
	UserData string
	PublicIP string
	IPv6     bool
	VPCUUID  string
	Created  time.Time
}

// String leaves the user-data out: it holds the proxy's credentials.
func (d Droplet) String() string {
	return fmt.Sprintf("{ID:%d Name:%s Status:%s Size:%s Region:%s PublicIP:%s Tags:%v}", d.ID, d.Name, d.Status, d.Size, d.Region, d.PublicIP, d.Tags)
}

// HasTag reports whether d carries tag.
func (d Droplet) HasTag(tag string) bool { return slices.Contains(d.Tags, tag) }

// Option configures a Fake.
type Option func(*options)

type options struct {
	steps    int
	listLag  int
	scopes   []string
	publicIP func(n int) string
	boot     faultkit.BootFunc
}

// WithSteps keeps a new droplet new for the first n reads that show it.
func WithSteps(n int) Option { return func(o *options) { o.steps = n } }

// WithListLag hides a new droplet from the first n list answers that would
// show it: DigitalOcean's listing by tag is eventually consistent.
func WithListLag(n int) Option { return func(o *options) { o.listLag = n } }

// WithScopes grants Token these scopes instead of Scopes.
func WithScopes(scopes ...string) Option { return func(o *options) { o.scopes = scopes } }

// WithPublicIP gives the nth droplet (from 1) its public IPv4 address.
// Default 127.0.104.n.
func WithPublicIP(ip func(n int) string) Option { return func(o *options) { o.publicIP = ip } }

// WithBoot runs boot when a droplet is created (from its user-data), and
// the halt it returns once the droplet is deleted.
func WithBoot(boot faultkit.BootFunc) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API, its faults those of the embedded kit, which
// serves it at URL (for godo.SetBaseURL). Its methods are safe for
// concurrent use.
type Fake struct {
	*faultkit.Kit[Op, Error]
	mu       sync.Mutex
	opts     options
	droplets map[int]*droplet
	created  []Droplet
	nextID   int
	// tags made by CreateTag, and the firewalls (firewalls.go).
	tags         map[string]bool
	firewalls    []godo.Firewall
	nextFirewall int
}

type droplet struct {
	Droplet
	faultkit.Lag     // list answers that do not show it yet
	reads        int // reads that showed it
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{droplets: map[int]*droplet{}, tags: map[string]bool{}, opts: options{scopes: Scopes}}
	for _, o := range opts {
		o(&f.opts)
	}
	f.Kit = faultkit.New(t, f.routes(), faultkit.Cloud[Op, Error]{
		Write: write, RateLimited: ErrRateLimited, Denied: denied, Random: randomFaults, Boot: f.opts.boot,
	})
	f.Grant(Token, faultkit.Credential{Permissions: f.opts.scopes})
	return f
}

// randomFaults are DigitalOcean's under load: its 5xx, a 429 and lost
// answers (twice: the share they had when the storms were tuned), and
// "size is not available" on creates.
func randomFaults(op Op) []faultkit.Fault[Error] {
	faults := []faultkit.Fault[Error]{faultkit.Error(ErrServerError), faultkit.Error(ErrUnavailable), faultkit.Error(ErrRateLimited), {Lose: true}, {Lose: true}}
	if op == CreateDroplet {
		faults = append(faults, faultkit.Error(ErrCapacity))
	}
	return faults
}

// boot starts what d runs (WithBoot).
func (f *Fake) boot(d *droplet) {
	f.Boot(strconv.Itoa(d.ID), faultkit.Boot{Name: d.Name, UserData: d.UserData, PublicIP: d.PublicIP})
}

// Droplets are the droplets that exist, by ID.
func (f *Fake) Droplets() []Droplet {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Droplet, 0, len(f.droplets))
	for _, id := range f.sortedIDs() {
		out = append(out, f.droplets[id].snapshot())
	}
	return out
}

// Created is every droplet ever created, in order.
func (f *Fake) Created() []Droplet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

func (d *droplet) snapshot() Droplet {
	out := d.Droplet
	out.Tags = slices.Clone(d.Tags)
	return out
}

func (f *Fake) sortedIDs() []int { return slices.Sorted(maps.Keys(f.droplets)) }

// Env is the environment that points the operator binary's digitalocean
// provider at the fake (digitalocean.EndpointEnv).
func (f *Fake) Env() []string { return []string{"DIGITALOCEAN_API_URL=" + f.URL} }
