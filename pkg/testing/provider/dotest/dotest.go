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
// without it is refused 403, as a custom-scoped token is, and UsedScopes
// tells which the provider needed. Requests are validated (size, image and
// region known; tag syntax; user-data size) with a 422 naming the field.
// Tests inject faults: FailNext, RateLimitNext (a 429 with Retry-After,
// and a count of the calls that came before it ran out), SetNoCapacity
// (422 "size is not available in this region" for a size),
// LoseNextAnswers (the call takes effect and the connection drops before
// the answer), HoldAnswers (it takes effect and its answer waits), and
// SetRandomFaults. WithBoot runs something (a real forward proxy) for each
// droplet, as hcloudtest does.
//
// Public addresses are loopback (WithPublicIP), so nothing leaves the host.
package dotest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/godo"
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
	// RetryAfter, on a 429, is sent as Retry-After (whole seconds).
	RetryAfter time.Duration
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
	boot     func(Droplet) (halt func())
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

// WithBoot runs boot when a droplet is created, and the halt it returns
// once the droplet is deleted. boot must not block.
func WithBoot(boot func(Droplet) (halt func())) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API. Its methods are safe for concurrent use.
type Fake struct {
	// URL is the endpoint for godo.SetBaseURL.
	URL string

	mu         sync.Mutex
	opts       options
	droplets   map[int]*droplet
	created    []Droplet
	nextID     int
	calls      map[Op]int
	usedScopes map[string]bool
	// tags made by CreateTag, and the firewalls (firewalls.go).
	tags         map[string]bool
	firewalls    []godo.Firewall
	nextFirewall int
	faults       map[Op][]Error
	lost         map[Op]int
	holds        map[Op]chan struct{}
	noCap        map[string]bool
	random       *rand.Rand
	rate         float64
	notBefore    time.Time
	earlyCalls   int
}

type droplet struct {
	Droplet
	reads  int
	listed int
	halt   func()
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{
		droplets: map[int]*droplet{}, calls: map[Op]int{}, usedScopes: map[string]bool{}, tags: map[string]bool{},
		faults: map[Op][]Error{}, lost: map[Op]int{}, holds: map[Op]chan struct{}{}, noCap: map[string]bool{},
		opts: options{scopes: Scopes},
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
		for _, d := range f.droplets {
			if d.halt != nil {
				d.halt()
			}
		}
	})
	return f
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
	e := ErrRateLimited
	e.RetryAfter = retryAfter
	f.FailNext(op, e)
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

// SetNoCapacity makes creates of size fail with 422 "Size is not available
// in this region." (or succeed again, none false).
func (f *Fake) SetNoCapacity(size string, none bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noCap[size] = none
}

// SetRandomFaults makes a share rate of all calls fail, drawn from seed:
// 429s, server errors and unavailability before any effect, capacity
// errors on creates, and lost answers after the effect. Rate 0 stops them.
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

// UsedScopes are the scopes the calls so far needed, sorted.
func (f *Fake) UsedScopes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for s := range f.usedScopes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
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

func (f *Fake) sortedIDs() []int {
	ids := make([]int, 0, len(f.droplets))
	for id := range f.droplets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Env is the environment that points the operator binary's digitalocean
// provider at the fake (digitalocean.EndpointEnv).
func (f *Fake) Env() []string { return []string{"DIGITALOCEAN_API_URL=" + f.URL} }
