// Package gce is the Compute Engine provider: each Managed proxy instance is
// a VM with an ephemeral external IPv4 address (its egress IP), configured by
// cloud-init from the `user-data` metadata item, built from spec.gce with the
// operator's project and zone as defaults.
//
// Instance IDs are "project/zone/name"; the name is the one the controller
// derives from the Proxy UID, so Create is idempotent by name. Create returns
// once Compute Engine accepted the insert and never waits for the VM; Get
// polls it; Delete returns once the delete is accepted. The design's tags
// become GCE labels through a documented mapping (labels.go) and travel
// exactly in metadata; ListByTag finds VMs through instances.aggregatedList
// with a label filter, in every zone.
//
// buildInstance, toInstance, the label mapping and classify are pure; the
// Provider methods are thin I/O around them. It does not watch, wait for
// operations, open firewall ports, or garbage-collect anything: the
// controller polls, docs/gce.md says how to set up the project, and pkg/gc
// collects orphans through ListByTag.
package gce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
)

// CredentialsSecretKey is the key of the service-account key in the Secret
// the operator's --gce-credentials-secret names.
const CredentialsSecretKey = "key.json"

// DefaultListPageSize is the page size of ListByTag: the API's maximum.
const DefaultListPageSize = 500

// operationMemory is how long the provider remembers an operation it started
// (to explain a VM that vanished, or to skip a second delete): longer than a
// VM takes to be created or deleted, short enough to stay small.
const operationMemory = time.Hour

// Options configures a Provider.
type Options struct {
	// Project and Zone are used when spec.gce.project or spec.gce.zone is
	// empty (the operator's --gce-project and --gce-zone). ListByTag lists
	// Project and every project this Provider has touched since it started.
	Project string
	Zone    string
	// CredentialsJSON is a service-account key (JSON); empty means
	// Application Default Credentials. Secret: never logged.
	CredentialsJSON []byte
	// Endpoint is the Compute Engine API's base URL. Default
	// compute.DefaultEndpoint.
	Endpoint string
	// HTTPClient, when set, sends every request as it is, with no
	// credentials added: tests point it and Endpoint at a fake. Nil means an
	// OAuth client from CredentialsJSON or Application Default Credentials.
	HTTPClient *http.Client
	// ListPageSize is the maxResults of one aggregatedList page. Default
	// DefaultListPageSize.
	ListPageSize int64
	// Clock ages remembered operations. Default the real clock.
	Clock clock.PassiveClock
	// Secrets reads a Secret of a Proxy's namespace: the credentials the
	// VM's metadata carries (MetadataAuthUsername). Nil fails the create of
	// every Proxy that has credentials, which is every Managed Proxy.
	Secrets provider.SecretReader
}

// Provider runs proxy instances as Compute Engine VMs. It is safe for
// concurrent use.
type Provider struct {
	api      *compute.Client
	project  string
	zone     string
	pageSize int64
	clock    clock.PassiveClock
	secrets  provider.SecretReader

	mu sync.Mutex
	// inserts: instance ID → our insert operation, until the VM is seen past
	// provisioning. An insert can fail after it was accepted (an exhausted
	// zone, a quota); the VM then never appears, and the operation says why.
	inserts map[string]trackedOperation
	// deletes: instance ID → our delete operation, so that Delete does not
	// ask twice while the first is running.
	deletes map[string]trackedOperation
	// projects ListByTag lists besides the default one: those where a VM
	// was created or seen (never one that only failed: a typo in one
	// Proxy's spec.gce.project must not break every listing).
	projects map[string]bool
}

type trackedOperation struct {
	name    string
	started time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider talking to the Compute Engine API. It makes no API
// call; credentials are looked up (ADC) or checked (a key) here, so missing
// Application Default Credentials or a malformed key fail at start-up.
func New(ctx context.Context, opts Options) (*Provider, error) {
	hc := opts.HTTPClient
	if hc == nil {
		var err error
		if hc, err = oauthClient(ctx, opts.CredentialsJSON); err != nil {
			return nil, fmt.Errorf("gce provider: %w", err)
		}
	}
	p := &Provider{
		api:      compute.New(opts.Endpoint, hc),
		project:  opts.Project,
		zone:     opts.Zone,
		pageSize: opts.ListPageSize,
		clock:    opts.Clock,
		secrets:  opts.Secrets,
		inserts:  map[string]trackedOperation{},
		deletes:  map[string]trackedOperation{},
		projects: map[string]bool{},
	}
	if p.pageSize <= 0 {
		p.pageSize = DefaultListPageSize
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	return p, nil
}

// oauthClient is an HTTP client that adds a Compute Engine token to every
// request: from the service-account key, or from Application Default
// Credentials when key is empty. The token source refreshes under ctx, the
// operator's lifetime.
func oauthClient(ctx context.Context, key []byte) (*http.Client, error) {
	var creds *google.Credentials
	var err error
	if len(key) > 0 {
		if err := checkServiceAccountKey(key); err != nil {
			return nil, err
		}
		// The key's own errors may quote it: say only that it was refused.
		if creds, err = google.CredentialsFromJSONWithType(ctx, key, google.ServiceAccount, compute.Scope); err != nil {
			return nil, errors.New("the service-account key was refused by the OAuth library")
		}
	} else if creds, err = google.FindDefaultCredentials(ctx, compute.Scope); err != nil {
		return nil, fmt.Errorf("Application Default Credentials: %w", err)
	}
	return oauth2.NewClient(ctx, creds.TokenSource), nil
}

// checkServiceAccountKey fails early, and without quoting it, on a key that
// the client library would only reject at the first API call.
func checkServiceAccountKey(key []byte) error {
	var fields struct {
		Type        string `json:"type"`
		ClientEmail string `json:"client_email"`
		PrivateKey  string `json:"private_key"`
	}
	if err := json.Unmarshal(key, &fields); err != nil {
		return errors.New("the credentials are not a JSON service-account key")
	}
	switch {
	case fields.Type != "service_account":
		return fmt.Errorf("the credentials are of type %q; only a service-account key (type service_account) is accepted", fields.Type)
	case fields.ClientEmail == "" || !strings.Contains(fields.PrivateKey, "PRIVATE KEY"):
		return errors.New("the service-account key lacks client_email or private_key")
	}
	return nil
}

// Create inserts the VM and returns as soon as Compute Engine accepted the
// insert. A VM of that name that already exists is returned as it is, if it
// serves the same Proxy.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("gce provider: a create request needs a name and a Proxy"))
	}
	project, zone, err := location(req.Proxy, p.project, p.zone)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("gce provider: %w", err))
	}
	id := instanceID(project, zone, req.Name)
	logger := klog.FromContext(ctx).WithValues("instance", id)

	// The credentials the VM's cloud-init must require (MetadataAuthUsername).
	creds, err := provider.ReadCredentials(ctx, "gce", req.Proxy, p.secrets)
	if err != nil {
		return provider.Instance{}, err
	}
	password := ""
	if creds != nil {
		password = creds.Password
	}
	vm := buildInstance(req, zone, creds)
	op, err := p.api.InsertInstance(ctx, project, zone, vm)
	if isAlreadyExists(err) {
		return p.adopt(ctx, req, project, zone)
	}
	if err == nil {
		err = newOperationError(op)
	}
	if err != nil {
		return provider.Instance{}, redact(fmt.Errorf("inserting VM %s: %w", id, classify(err)), req.CloudInit, password)
	}
	p.rememberProject(project)
	p.track(p.inserts, id, op.Name)
	logger.V(2).Info("VM insert accepted", "operation", op.Name, "machineType", vm.MachineType, "spot", vm.Scheduling != nil)
	return provider.Instance{ID: id, State: provider.StateProvisioning, Tags: maps.Clone(req.Tags), Message: "insert accepted"}, nil
}

// adopt returns the existing VM of a create request's name.
func (p *Provider) adopt(ctx context.Context, req provider.CreateRequest, project, zone string) (provider.Instance, error) {
	id := instanceID(project, zone, req.Name)
	vm, err := p.api.GetInstance(ctx, project, zone, req.Name)
	if err != nil {
		// A 404 here means it went away in between: retry the create.
		return provider.Instance{}, fmt.Errorf("reading existing VM %s: %w", id, provider.Transient(err))
	}
	inst := toInstance(project, zone, vm)
	if uid := crawlv1alpha1.TagProxyUID; inst.Tags[uid] != req.Tags[uid] {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("VM %s exists and does not belong to this Proxy (tag %s=%q)", id, uid, inst.Tags[uid]))
	}
	p.rememberProject(project)
	klog.FromContext(ctx).V(2).Info("VM exists; adopting it", "instance", id, "status", vm.Status)
	return inst, nil
}

// Get observes the VM with this ID. A VM that is not there yet while our
// insert still runs is provisioning; one whose insert failed reports the
// operation's error, classified (so a zone out of resources is a quota error,
// not a vanished VM to re-create at once).
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	project, zone, name, ok := parseID(id)
	if !ok {
		// No VM can have this ID; saying so lets the controller move on.
		return provider.Instance{}, fmt.Errorf("instance %q is not project/zone/name: %w", id, provider.ErrNotFound)
	}
	vm, err := p.api.GetInstance(ctx, project, zone, name)
	if isNotFound(err) {
		p.forget(p.deletes, id)
		return p.missing(ctx, id, project, zone)
	}
	if err != nil {
		return provider.Instance{}, fmt.Errorf("reading VM %s: %w", id, classify(err))
	}
	p.rememberProject(project)
	inst := toInstance(project, zone, vm)
	if inst.State != provider.StateProvisioning {
		p.forget(p.inserts, id)
	}
	return inst, nil
}

// missing explains a VM that Get did not find, from our insert operation.
func (p *Provider) missing(ctx context.Context, id, project, zone string) (provider.Instance, error) {
	notFound := fmt.Errorf("VM %s: %w", id, provider.ErrNotFound)
	opName, ok := p.tracked(p.inserts, id)
	if !ok {
		return provider.Instance{}, notFound
	}
	op, err := p.api.GetZoneOperation(ctx, project, zone, opName)
	switch {
	case isNotFound(err):
		p.forget(p.inserts, id)
		return provider.Instance{}, notFound
	case err != nil:
		return provider.Instance{}, fmt.Errorf("reading insert operation %s of VM %s: %w", opName, id, classify(err))
	case op.Status != "DONE":
		return provider.Instance{ID: id, State: provider.StateProvisioning, Message: "insert " + strings.ToLower(op.Status)}, nil
	}
	p.forget(p.inserts, id)
	if opErr := newOperationError(op); opErr != nil {
		return provider.Instance{}, fmt.Errorf("creating VM %s: %w", id, classify(opErr))
	}
	return provider.Instance{}, notFound
}

// Delete asks Compute Engine to delete the VM. A VM that is gone, or whose
// deletion we already started and is still running, is fine.
func (p *Provider) Delete(ctx context.Context, id string) error {
	project, zone, name, ok := parseID(id)
	if !ok {
		return nil
	}
	if opName, ok := p.tracked(p.deletes, id); ok {
		op, err := p.api.GetZoneOperation(ctx, project, zone, opName)
		if err == nil && op.Status != "DONE" {
			return nil
		}
		// Finished (or unknown): ask again, the name may have a new VM.
		p.forget(p.deletes, id)
	}
	op, err := p.api.DeleteInstance(ctx, project, zone, name)
	if isNotFound(err) {
		p.forget(p.inserts, id)
		return nil
	}
	if err == nil {
		err = newOperationError(op)
	}
	if err != nil {
		return fmt.Errorf("deleting VM %s: %w", id, classify(err))
	}
	p.forget(p.inserts, id)
	p.track(p.deletes, id, op.Name)
	klog.FromContext(ctx).V(2).Info("VM delete accepted", "instance", id, "operation", op.Name)
	return nil
}

// ListByTag lists the VMs labelled with the tag in every zone of the
// default project and of every project this Provider has created VMs in.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	filter := fmt.Sprintf("labels.%s = %q", labelKey(key), labelValue(value))
	var out []provider.Instance
	for _, project := range p.listProjects() {
		err := p.api.ListInstances(ctx, project, filter, p.pageSize, func(page *compute.InstanceAggregatedList) error {
			for scope, list := range page.Items {
				zone := strings.TrimPrefix(scope, "zones/")
				for _, vm := range list.Instances {
					inst := toInstance(project, zone, vm)
					// A shortened label value could in theory be shared; the
					// exact tags decide.
					if inst.Tags[key] == value {
						out = append(out, inst)
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing VMs of project %s with %s: %w", project, filter, classify(err))
		}
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (p *Provider) rememberProject(project string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.projects[project] = true
}

func (p *Provider) listProjects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	projects := slices.Collect(maps.Keys(p.projects))
	if p.project != "" && !p.projects[p.project] {
		projects = append(projects, p.project)
	}
	slices.Sort(projects)
	return projects
}

// track remembers an operation, and forgets the ones older than
// operationMemory so that the maps stay small.
func (p *Provider) track(ops map[string]trackedOperation, id, opName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	for k, op := range ops {
		if now.Sub(op.started) > operationMemory {
			delete(ops, k)
		}
	}
	ops[id] = trackedOperation{name: opName, started: now}
}

func (p *Provider) tracked(ops map[string]trackedOperation, id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op, ok := ops[id]
	if !ok || p.clock.Now().Sub(op.started) > operationMemory {
		return "", false
	}
	return op.name, true
}

func (p *Provider) forget(ops map[string]trackedOperation, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(ops, id)
}
