// Package gcetest is an in-process fake of the part of the Compute Engine
// API that pkg/provider/gce uses, served by net/http/httptest on 127.0.0.1:
// instances insert, get, delete and aggregatedList (label filter,
// maxResults/pageToken pagination) and zone operations get. Point the real
// client at it with ClientOptions.
//
// It behaves like the real API where the provider can tell: inserts and
// deletes return long-running operations; a VM goes PROVISIONING → STAGING
// → RUNNING, and STOPPING → gone after a delete, one status per WithSteps
// Gets of that VM (no goroutine moves anything, so tests are deterministic);
// errors are Google-format bodies ({"error":{"code","message","errors":
// [{"reason","message","domain"}]}}); requests are validated (an unknown
// project or zone in the path is a 404, a bad label or name a 400, an unknown
// machine type a 400, an unknown image a 404, an existing name a 409).
// Tests program faults through the embedded faultkit.Kit (FailNext,
// FailEvery, and at random or after the effect: SetRandomFaults,
// LoseNextAnswers, which answers 503 after the effect) and
// FailNextInsertAsync, choose
// the external IP of VMs (WithAddress, SetNatIP: by default 127.0.100.x, so
// nothing ever reaches past loopback) and change VMs behind the provider's
// back (Put, SetStatus, Remove).
//
// It is not a simulation of Compute Engine: there are no disks, networks,
// firewalls, quotas or regions, nothing listens at the addresses it reports
// unless the test starts something there, and authentication is not checked.
package gcetest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/option"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// DefaultProject and DefaultZones are the project and zones of a server
// without WithZones.
const DefaultProject = "test-project"

// DefaultZones are the zones of DefaultProject.
var DefaultZones = []string{"test-zone-a", "test-zone-b"}

// DefaultMachineTypes and DefaultImages are what inserts may name unless
// WithMachineTypes or WithImages say otherwise.
var (
	DefaultMachineTypes = []string{"e2-micro", "e2-small", "e2-medium", "e2-standard-2", "n2-standard-2"}
	DefaultImages       = []string{
		"projects/debian-cloud/global/images/family/debian-12",
		"projects/debian-cloud/global/images/family/debian-13",
		"projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
	}
)

// selfLinkBase is the prefix of the resource URLs the real API returns.
const selfLinkBase = "https://www.googleapis.com/compute/v1/"

// Method names an API method, for faults and call records.
type Method string

// The methods the fake serves.
const (
	MethodInsert         Method = "compute.instances.insert"
	MethodGet            Method = "compute.instances.get"
	MethodDelete         Method = "compute.instances.delete"
	MethodAggregatedList Method = "compute.instances.aggregatedList"
	MethodOperationGet   Method = "compute.zoneOperations.get"
)

// APIError is a Google-format error the fake answers with.
type APIError struct {
	Code    int
	Reason  string
	Message string
	// Domain defaults to "global".
	Domain string
}

// QuotaExceeded is the 403 of an insert over a regional quota.
func QuotaExceeded() *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "quotaExceeded", Message: "Quota 'CPUS' exceeded.  Limit: 8.0 in region test-region."}
}

// RateLimitExceeded is the 403 of too many API calls.
func RateLimitExceeded() *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "rateLimitExceeded", Message: "Rate Limit Exceeded", Domain: "usageLimits"}
}

// Forbidden is the 403 of a missing IAM permission.
func Forbidden(permission string) *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "forbidden", Message: fmt.Sprintf("Required '%s' permission", permission)}
}

// BackendError is a 503 worth retrying.
func BackendError() *APIError {
	return &APIError{Code: http.StatusServiceUnavailable, Reason: "backendError", Message: "Internal error. Please try again or contact Google Support."}
}

// Option configures a Server in New.
type Option func(*Server)

// WithZones sets a project and its zones; repeat for more projects. The
// first call replaces the default project.
func WithZones(project string, zones ...string) Option {
	return func(s *Server) {
		if !s.zonesSet {
			s.zones = map[string][]string{}
			s.zonesSet = true
		}
		s.zones[project] = slices.Clone(zones)
	}
}

// WithSteps sets how many Gets of a VM each transitional status lasts
// (PROVISIONING, STAGING, STOPPING); 0 makes VMs run, and deleted VMs go,
// at once. Default 1.
func WithSteps(n int) Option { return func(s *Server) { s.steps = n } }

// WithAddress sets the natIP each new VM gets when it is staged. f runs
// under the server's lock: it must not call the Server.
func WithAddress(f func(project, zone, name string) string) Option {
	return func(s *Server) { s.address = f }
}

// Call is one request the fake received.
type Call struct {
	Method Method
	// Path is the request path below the API's base path.
	Path  string
	Query url.Values
}

// Server is the fake, its faults those of the embedded kit, which serves
// it on 127.0.0.1. Its methods are safe for concurrent use.
type Server struct {
	*faultkit.Kit[Method, *APIError]
	// URL is the base path to pass to option.WithEndpoint (the kit's URL
	// and the API's path).
	URL string

	zonesSet     bool
	zones        map[string][]string
	steps        int
	address      func(project, zone, name string) string
	machineTypes []string
	images       []string

	mu         sync.Mutex
	vms        map[vmKey]*vm
	operations map[opKey]*operation
	asyncFails []*compute.OperationError
	asyncCodes []int
	requests   []Call
	serial     uint64
	addresses  int
	ipv6Ranges int // external /96s handed out
}

type vmKey struct{ project, zone, name string }

func (k vmKey) path() string {
	return "projects/" + k.project + "/zones/" + k.zone + "/instances/" + k.name
}

type opKey struct{ project, zone, name string }

// vm is one VM and where it is in its life.
type vm struct {
	inst *compute.Instance
	// seen counts Gets in the current status.
	seen     int
	deleting bool
}

// operation is a zone operation and what decides when it is done.
type operation struct {
	op *compute.Operation
	// target is the VM the operation acts on.
	target vmKey
	// failure makes an insert fail after `steps` Gets of the operation.
	failure  *compute.OperationError
	httpCode int
	seen     int
}

// New starts a fake on 127.0.0.1, closed when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		zones:        map[string][]string{DefaultProject: slices.Clone(DefaultZones)},
		steps:        1,
		machineTypes: slices.Clone(DefaultMachineTypes),
		images:       slices.Clone(DefaultImages),
		vms:          map[vmKey]*vm{},
		operations:   map[opKey]*operation{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.address == nil {
		s.address = s.loopbackAddress
	}
	lost := BackendError() // the front end answers for the back end that acted
	s.Kit = faultkit.New(t, s.routes(), faultkit.Cloud[Method, *APIError]{
		Write: write, RateLimited: RateLimitExceeded(), Random: randomFaults, Lost: &lost,
	})
	s.URL = s.Kit.URL + "/compute/v1/"
	return s
}

// routes serve the API's methods with and without its base path, and
// Google's 404 for any other.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"", "/compute/v1"} {
		mux.HandleFunc("POST "+prefix+"/projects/{project}/zones/{zone}/instances", s.route(MethodInsert, s.insert))
		mux.HandleFunc("GET "+prefix+"/projects/{project}/zones/{zone}/instances/{name}", s.route(MethodGet, s.get))
		mux.HandleFunc("DELETE "+prefix+"/projects/{project}/zones/{zone}/instances/{name}", s.route(MethodDelete, s.delete))
		mux.HandleFunc("GET "+prefix+"/projects/{project}/aggregated/instances", s.route(MethodAggregatedList, s.aggregatedList))
		mux.HandleFunc("GET "+prefix+"/projects/{project}/zones/{zone}/operations/{operation}", s.route(MethodOperationGet, s.getOperation))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &APIError{Code: http.StatusNotFound, Reason: "notFound", Message: "The requested URL " + r.URL.Path + " was not found on this server."})
	})
	return mux
}

// HTTPClient is the client that reaches the fake (gce.Options.HTTPClient,
// with URL as the Endpoint).
func (s *Server) HTTPClient() *http.Client { return s.Client() }

// ClientOptions point google.golang.org/api's compute.Service at the fake,
// without credentials: the fake's own tests check it against Google's client.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(s.URL),
		option.WithoutAuthentication(),
		option.WithHTTPClient(s.Client()),
	}
}

// FailNextInsertAsync makes the next insert be accepted and its operation
// then fail with code (e.g. "ZONE_RESOURCE_POOL_EXHAUSTED",
// "QUOTA_EXCEEDED", "RESOURCE_NOT_FOUND") and httpStatus after `steps` Gets
// of the operation; the VM never appears, as when a zone has no capacity.
func (s *Server) FailNextInsertAsync(code, message string, httpStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asyncFails = append(s.asyncFails, &compute.OperationError{Errors: []*compute.OperationErrorErrors{{Code: code, Message: message}}})
	s.asyncCodes = append(s.asyncCodes, httpStatus)
}

// Requests are the requests received so far, in order.
func (s *Server) Requests() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Instance returns a copy of a VM as the API would show it (without
// advancing it), and whether it exists.
func (s *Server) Instance(project, zone, name string) (*compute.Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[vmKey{project, zone, name}]
	if !ok {
		return nil, false
	}
	return clone(v.inst), true
}

// Instances returns copies of every VM, ordered by project, zone and name.
func (s *Server) Instances() []*compute.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.sortedKeys(func(vmKey) bool { return true })
	out := make([]*compute.Instance, 0, len(keys))
	for _, k := range keys {
		out = append(out, clone(s.vms[k].inst))
	}
	return out
}

// Put adds (or replaces) a VM as if created behind the provider's back, in
// the status it has (RUNNING when empty), with the server-set fields filled.
func (s *Server) Put(project, zone string, inst *compute.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst = clone(inst)
	if inst.Status == "" {
		inst.Status = "RUNNING"
	}
	k := vmKey{project, zone, inst.Name}
	s.fillServerFields(k, inst)
	if inst.Status == "RUNNING" || inst.Status == "STAGING" {
		s.assignAddress(k, inst)
	}
	s.vms[k] = &vm{inst: inst}
}
