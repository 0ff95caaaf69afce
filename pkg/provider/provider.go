// Package provider is the contract between the controller and whatever runs
// proxy instances (Pods, VMs, local processes). The controller never watches
// instances: it polls them through Get, so a cloud API without watches fits
// the same flow. This package holds the interface, the instance model, the
// names and tags every instance carries, the error classes that decide how
// the controller retries, and the Registration a provider describes itself
// with (registry.go); it holds no implementation and no list of providers.
package provider

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Provider creates, observes and deletes proxy instances.
//
// Implementations are safe for concurrent use. IDs are opaque to callers;
// they are what Create returned and what status.providerID records.
type Provider interface {
	// Create starts an instance and returns once the provider accepted it; it
	// never waits for the instance to run. Creating a name that already exists
	// returns that instance (create is idempotent by name), so a controller
	// that crashed after Create and before recording the ID adopts it.
	Create(ctx context.Context, req CreateRequest) (Instance, error)
	// Get observes an instance; ErrNotFound when it does not exist.
	Get(ctx context.Context, id string) (Instance, error)
	// Delete asks for the instance to go away; deleting a missing instance is
	// not an error. It returns before the instance is gone: poll Get.
	Delete(ctx context.Context, id string) error
	// ListByTag returns every instance carrying tag key=value, wherever it
	// lives (all namespaces, all zones).
	ListByTag(ctx context.Context, key, value string) ([]Instance, error)
}

// Sweeper is a provider that owns resources besides instances (the aws
// provider's security groups). The orphan GC calls Sweep after listing the
// provider's instances each round; it deletes what no instance uses any
// longer and returns how many it deleted.
type Sweeper interface {
	Sweep(ctx context.Context) (int, error)
}

// CreateRequest is everything a provider needs to start an instance.
type CreateRequest struct {
	// Name is the instance name, derived from the Proxy UID (InstanceName).
	Name string
	// Proxy is the object the instance serves; providers read their own spec
	// block (spec.kubernetes, spec.gce, ...) and the namespace from it. Read-only.
	Proxy *crawlv1alpha1.Proxy
	// Tags are set on the instance (labels, GCE labels, the state file).
	Tags map[string]string
	// CloudInit is the resolved user-data, nil when the spec has none. Secret:
	// never log it.
	CloudInit []byte
	// SpecHash identifies the spec the instance is built from.
	SpecHash string
}

// State is where an instance is in its life.
type State string

const (
	// StateProvisioning: accepted, not yet serving.
	StateProvisioning State = "Provisioning"
	// StateRunning: serving at IP:Port.
	StateRunning State = "Running"
	// StateStopped: stopped, terminated, preempted or failed. Instances are
	// cattle: the controller deletes a stopped instance and creates a new one.
	StateStopped State = "Stopped"
)

// Instance is a provider's view of one proxy instance.
type Instance struct {
	ID    string
	State State
	// IP and Port are where crawlers reach the proxy; set once Running.
	IP   string
	Port int32
	Tags map[string]string
	// Message explains the state in a few words, for conditions and events.
	Message string
	// Interruption, when set, says the provider will take a Running instance
	// away soon (a Spot interruption notice): it still serves, and the
	// controller drains it as a pool drains a member it replaces.
	Interruption string
	// Interruptible: the instance may get such a notice (a Spot instance),
	// so the controller polls it often enough to see one in time.
	Interruptible bool
	// SpecHash is the CreateRequest.SpecHash the instance was built from;
	// "" when the provider cannot tell. Create is idempotent by name, so it
	// may return an instance an earlier request made from an older spec.
	SpecHash string
	// CreatedAt is when the provider made the instance. Providers whose
	// instances are not unique by name (cloud VMs: a launch retried at
	// another place is another instance) set it, and the orphan collector
	// then deletes an old instance of a live Proxy that is not the one the
	// Proxy's status names (pkg/gc, duplicates). Zero: never judged a
	// duplicate (Pods and processes are unique by name).
	CreatedAt time.Time
	// ExitRanges are the prefixes (CIDRs) the instance's forward-proxy
	// leaves from, one address per session (docs/ipv6.md): a cloud's
	// delegated IPv6 prefix, or what the spec declares. Empty: the instance
	// has one exit, its own address.
	ExitRanges []string
}

// InstanceName derives the instance name from the Proxy UID: stable across
// restarts, unique, DNS-safe, and short enough for every provider.
func InstanceName(uid types.UID) string {
	hex := strings.ReplaceAll(string(uid), "-", "")
	if len(hex) > 16 {
		hex = hex[:16]
	}
	return "px-" + strings.ToLower(hex)
}

// Tags are the tags every instance of p carries. pkg/gc finds orphans by
// them: TagManagedBy selects the operator's instances (ListByTag) and
// TagProxyUID ties each to its Proxy, so a provider must store both as given
// (or map them reversibly, as gce does for labels).
func Tags(p *crawlv1alpha1.Proxy) map[string]string {
	return map[string]string{
		crawlv1alpha1.TagManagedBy:      crawlv1alpha1.ManagedByValue,
		crawlv1alpha1.TagProxyUID:       string(p.UID),
		crawlv1alpha1.TagProxyNamespace: p.Namespace,
		crawlv1alpha1.TagProxyName:      p.Name,
	}
}

// ErrNotFound is returned by Get for an instance that does not exist.
var ErrNotFound = errors.New("instance not found")

// The error classes. A provider wraps its errors with Quota, Permanent or
// Transient; anything unwrapped counts as transient.
var (
	// ErrQuotaExceeded: out of quota; retry on a fixed, slow schedule.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrPermanent: retrying cannot help (invalid request, no permission);
	// the Proxy fails until its spec changes.
	ErrPermanent = errors.New("permanent provider error")
	// ErrTransient: retry with backoff.
	ErrTransient = errors.New("transient provider error")
)

// Quota marks err as a quota error.
func Quota(err error) error { return &classified{class: ErrQuotaExceeded, err: err} }

// Permanent marks err as a permanent error.
func Permanent(err error) error { return &classified{class: ErrPermanent, err: err} }

// Transient marks err as transient (the default; for explicitness).
func Transient(err error) error { return &classified{class: ErrTransient, err: err} }

// WithClass marks err with class: ErrQuotaExceeded, ErrPermanent, or
// anything else for ErrTransient. For code that decides the class before it
// wraps (an error-code table, a random draw in a test).
func WithClass(class, err error) error {
	switch class {
	case ErrQuotaExceeded, ErrPermanent:
		return &classified{class: class, err: err}
	default:
		return Transient(err)
	}
}

// Class returns ErrQuotaExceeded, ErrPermanent or ErrTransient for err.
func Class(err error) error {
	switch {
	case errors.Is(err, ErrQuotaExceeded):
		return ErrQuotaExceeded
	case errors.Is(err, ErrPermanent):
		return ErrPermanent
	default:
		return ErrTransient
	}
}

// ClassName is Class as a short label for metrics: quota, permanent, transient.
func ClassName(err error) string {
	switch Class(err) {
	case ErrQuotaExceeded:
		return "quota"
	case ErrPermanent:
		return "permanent"
	default:
		return "transient"
	}
}

type classified struct {
	class error
	err   error
}

func (c *classified) Error() string { return c.err.Error() }

func (c *classified) Unwrap() []error { return []error{c.class, c.err} }

// ProviderID is what status.providerID records: the provider that made the
// instance and the instance's ID there, as "<provider>://<id>" (the shape of
// a Node's spec.providerID). Knowing the maker lets the controller delete an
// instance through its own provider after spec.provider changed.
func ProviderID(providerName, id string) string { return providerName + "://" + id }

// SplitProviderID parses a ProviderID; ok is false for anything else.
func SplitProviderID(providerID string) (providerName, id string, ok bool) {
	providerName, id, ok = strings.Cut(providerID, "://")
	if !ok || providerName == "" || id == "" {
		return "", "", false
	}
	return providerName, id, true
}
