// Package hetzner is the Hetzner Cloud provider: each Managed proxy
// instance is a Hetzner Cloud server with a public IPv4 address (its
// egress IP), configured by cloud-init from the kit's user-data
// (pkg/provider/cloudkit), built from spec.hetzner with the operator's
// location as the default. It speaks to Hetzner only through the official
// SDK (hcloud-go) and is the mapping between that SDK and the kit
// (docs/decisions/0300-hetzner-provider-on-a-cloud-kit.md).
//
// Instance IDs are the servers' numeric IDs. Create is idempotent by
// Hetzner's own means: server names are unique in a project, and a
// create's name derives from its idempotency key (cluster, Proxy, spec), so
// a create retried after a lost answer or a crash fails on the name and
// adopts the server the first one made. Every call passes one gate (a token
// bucket under the project's rate limit, and any Retry-After a 429 set).
package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults of Options. Hetzner allows 3600 requests an hour per project,
// refilled at one a second (API reference, "Rate Limiting").
const (
	DefaultRequestsPerSecond = 1.0
	DefaultBurst             = 60
	DefaultMaxAttempts       = 5
	// DefaultRateLimitBackoff is the wait after a 429 that named no time.
	DefaultRateLimitBackoff = 2 * time.Second
)

// EndpointEnv names the environment variable that, as for Hetzner's own
// CLI, replaces the API's address when set (the operator binary reads it).
const EndpointEnv = "HCLOUD_ENDPOINT"

// TokenSecretKey is the key of the API token in the Secret
// --hetzner-token-secret names.
const TokenSecretKey = "token"

// Options configures a Provider.
type Options struct {
	// Token is a Read & Write API token of the project. Required. Secret.
	Token string
	// ClusterID labels every server (cloudkit.LabelClusterID) and scopes
	// every listing, adoption and deletion to it. Required.
	ClusterID string
	// Location is used when spec.hetzner.location is empty (--hetzner-location).
	Location string
	// Endpoint, when set, is where every API request goes (tests).
	Endpoint string
	// HTTPClient, when set, sends the SDK's requests.
	HTTPClient *http.Client
	// RequestsPerSecond and Burst are the gate's token bucket. Defaults
	// DefaultRequestsPerSecond and DefaultBurst.
	RequestsPerSecond float64
	Burst             int
	// MaxAttempts bounds the attempts of a call that is rate-limited.
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// RateLimitBackoff is the wait after a 429 that named no time. Default
	// DefaultRateLimitBackoff.
	RateLimitBackoff time.Duration
	// Clock times Retry-After. Default the real clock.
	Clock clock.Clock
	// Secrets reads the credentials Secret of a Proxy (written into the
	// server's user-data).
	Secrets provider.SecretReader
}

// Provider runs proxy instances as Hetzner Cloud servers. It is safe for
// concurrent use.
type Provider struct {
	client      *hcloud.Client
	clusterID   string
	location    string
	gate        *cloudkit.Gate
	clock       clock.Clock
	maxAttempts int
	backoff     time.Duration
	secrets     provider.SecretReader

	// firewallUse is held (read) by a create from its firewall's check to
	// its server's create, and (write) by Sweep from its check that a
	// firewall is unused to its delete: a server is never made for a
	// firewall being deleted.
	firewallUse sync.RWMutex
	mu          sync.Mutex
	firewalls   map[string]bool // keys of the owned firewalls known to exist
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Sweeper  = (*Provider)(nil)
)

// New returns a Provider. It makes no API call.
func New(opts Options) (*Provider, error) {
	switch {
	case opts.Token == "":
		return nil, errors.New("hetzner provider: an API token is required")
	case opts.ClusterID == "":
		return nil, errors.New("hetzner provider: a cluster ID is required")
	}
	clientOpts := []hcloud.ClientOption{
		hcloud.WithToken(opts.Token),
		hcloud.WithApplication("proxy-operator", ""),
		// The gate retries rate-limited calls after their Retry-After; the
		// controller's workqueue retries the rest. The SDK's own retries
		// would wait their own backoff, not Hetzner's.
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}),
	}
	if opts.Endpoint != "" {
		clientOpts = append(clientOpts, hcloud.WithEndpoint(opts.Endpoint))
	}
	if opts.HTTPClient != nil {
		clientOpts = append(clientOpts, hcloud.WithHTTPClient(opts.HTTPClient))
	}
	p := &Provider{
		client: hcloud.NewClient(clientOpts...), clusterID: opts.ClusterID, location: opts.Location,
		clock: opts.Clock, maxAttempts: opts.MaxAttempts, backoff: opts.RateLimitBackoff, secrets: opts.Secrets,
		firewalls: map[string]bool{},
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.maxAttempts <= 0 {
		p.maxAttempts = DefaultMaxAttempts
	}
	if p.backoff <= 0 {
		p.backoff = DefaultRateLimitBackoff
	}
	perSecond, burst := opts.RequestsPerSecond, opts.Burst
	if perSecond == 0 {
		perSecond = DefaultRequestsPerSecond
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	p.gate = cloudkit.NewGate(perSecond, burst, p.clock)
	return p, nil
}

// call runs one API call through the gate (cloudkit.Gate.Call): again
// after each 429, never before the time the 429 named. It returns the
// classified error.
func (p *Provider) call(ctx context.Context, api func(ctx context.Context) (*hcloud.Response, error)) error {
	return p.gate.Call(ctx, p.maxAttempts, p.backoff, func(ctx context.Context) error {
		resp, err := api(ctx)
		now := p.clock.Now()
		if resp != nil && resp.Meta.Ratelimit.Limit > 0 && resp.Meta.Ratelimit.Remaining == 0 {
			p.gate.Defer(resp.Meta.Ratelimit.Reset) // the project's bucket is empty
		}
		if err == nil {
			return nil
		}
		return classify(err, resp, now)
	})
}

// HeldUntil is the time before which the provider makes no call: the
// Retry-After of the last 429, or the reset of an empty rate-limit bucket.
func (p *Provider) HeldUntil() time.Time { return p.gate.NotBefore() }

// Create makes the server on the first server type with capacity, or
// adopts the one an earlier create of the same key made.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("hetzner provider: a create request needs a name and a Proxy"))
	}
	s, err := settingsOf(req.Proxy, p.location)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("hetzner provider: %w", err))
	}
	creds, err := provider.ReadCredentials(ctx, "hetzner", req.Proxy, p.secrets)
	if err != nil {
		return provider.Instance{}, err
	}
	userData, err := cloudkit.UserData("hetzner", req, creds, s.port, MaxUserData, userDataOptions(s)...)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("hetzner provider: %w", err))
	}
	name, labels := cloudkit.InstanceName(req, p.clusterID), serverLabels(req, p.clusterID, s)
	if len(s.allowFrom) > 0 {
		p.firewallUse.RLock()
		defer p.firewallUse.RUnlock()
		key, err := p.ownedFirewall(ctx, s)
		if err != nil {
			return provider.Instance{}, err
		}
		labels[LabelFirewall] = key
	}
	var inst provider.Instance
	err = cloudkit.WalkPlaces(s.serverTypes, func(serverType string) error {
		var res hcloud.ServerCreateResult
		err := p.call(ctx, func(ctx context.Context) (resp *hcloud.Response, err error) {
			res, resp, err = p.client.Server.Create(ctx, createOpts(name, labels, userData, s, serverType))
			return resp, err
		})
		switch {
		case err == nil:
			inst = toInstance(res.Server)
			klog.FromContext(ctx).V(2).Info("Server created", "server", name, "id", inst.ID, "serverType", serverType)
		case cloudkit.KindOf(err) == cloudkit.KindConflict:
			inst, err = p.adopt(ctx, name, req.Proxy)
		case cloudkit.KindOf(err) == cloudkit.KindCapacity:
			klog.FromContext(ctx).V(2).Info("No capacity; trying the next server type", "server", name, "serverType", serverType)
		}
		return err
	})
	if err != nil {
		return provider.Instance{}, cloudkit.ProviderError(fmt.Sprintf("creating server %s in %s", name, s.location), err)
	}
	return inst, nil
}

// adopt returns the server holding name, made by an earlier create of the
// same key, when it is this cluster's and this Proxy's.
func (p *Provider) adopt(ctx context.Context, name string, proxy *crawlv1alpha1.Proxy) (provider.Instance, error) {
	var srv *hcloud.Server
	err := p.call(ctx, func(ctx context.Context) (resp *hcloud.Response, err error) {
		srv, resp, err = p.client.Server.GetByName(ctx, name)
		return resp, err
	})
	switch {
	case err != nil:
		return provider.Instance{}, fmt.Errorf("reading the server holding the name: %w", err)
	case srv == nil: // deleted since, or not yet listed
		return provider.Instance{}, cloudkit.Classify(cloudkit.KindTransient, errors.New("the name is taken, but no server listed holds it yet; retrying"))
	case !cloudkit.Owned(srv.Labels, p.clusterID) || srv.Labels[crawlv1alpha1.TagProxyUID] != string(proxy.UID):
		return provider.Instance{}, cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("the name is taken by server %d, which is not this Proxy's: rename or delete it", srv.ID))
	case srv.Status == hcloud.ServerStatusDeleting:
		return provider.Instance{}, cloudkit.Classify(cloudkit.KindTransient, fmt.Errorf("server %d, built from the same spec, is being deleted; retrying once it is gone", srv.ID))
	}
	klog.FromContext(ctx).V(2).Info("Adopting the server an earlier create made", "server", name, "id", srv.ID)
	return toInstance(srv), nil
}

// server reads the server with this ID: nil when it does not exist or is
// another cluster's (which does not exist for this one).
func (p *Provider) server(ctx context.Context, id string) (*hcloud.Server, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return nil, nil
	}
	var srv *hcloud.Server
	err = p.call(ctx, func(ctx context.Context) (resp *hcloud.Response, err error) {
		srv, resp, err = p.client.Server.GetByID(ctx, n)
		return resp, err
	})
	if err != nil || srv == nil {
		return nil, err
	}
	if !cloudkit.Owned(srv.Labels, p.clusterID) {
		klog.FromContext(ctx).V(2).Info("Ignoring a server of another cluster", "id", id, "cluster", srv.Labels[cloudkit.LabelClusterID])
		return nil, nil
	}
	return srv, nil
}

// Get observes the server with this ID.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	srv, err := p.server(ctx, id)
	switch {
	case err != nil:
		return provider.Instance{}, cloudkit.ProviderError("reading server "+id, err)
	case srv == nil:
		return provider.Instance{}, fmt.Errorf("server %s: %w", id, provider.ErrNotFound)
	}
	return toInstance(srv), nil
}

// Delete deletes the server, if it is this cluster's; one that is gone is fine.
func (p *Provider) Delete(ctx context.Context, id string) error {
	srv, err := p.server(ctx, id)
	if err != nil || srv == nil || srv.Status == hcloud.ServerStatusDeleting {
		return cloudkit.ProviderError("reading server "+id+" before deleting it", err)
	}
	err = p.call(ctx, func(ctx context.Context) (*hcloud.Response, error) {
		_, resp, err := p.client.Server.DeleteWithResult(ctx, srv)
		return resp, err
	})
	if err != nil && cloudkit.KindOf(err) != cloudkit.KindNotFound {
		return cloudkit.ProviderError("deleting server "+id, err)
	}
	klog.FromContext(ctx).V(2).Info("Server delete accepted", "id", id, "server", srv.Name)
	return nil
}

// listAll reads every page of a list by label selector through the gate:
// Hetzner answers at most 50 entries a page, whatever a call asks for.
func listAll[T any](ctx context.Context, p *Provider, selector string, list func(context.Context, hcloud.ListOpts) ([]T, *hcloud.Response, error)) ([]T, error) {
	var all []T
	for page := 1; page > 0; {
		opts := hcloud.ListOpts{LabelSelector: selector, Page: page, PerPage: 50}
		err := p.call(ctx, func(ctx context.Context) (*hcloud.Response, error) {
			got, resp, err := list(ctx, opts)
			all, page = append(all, got...), 0
			if err == nil && resp.Meta.Pagination != nil {
				page = resp.Meta.Pagination.NextPage
			}
			return resp, err
		})
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}

// ListByTag lists this cluster's servers carrying the label key=value.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	selector := key + "==" + value + "," + cloudkit.LabelClusterID + "==" + p.clusterID
	servers, err := listAll(ctx, p, selector, func(ctx context.Context, opts hcloud.ListOpts) ([]*hcloud.Server, *hcloud.Response, error) {
		return p.client.Server.List(ctx, hcloud.ServerListOpts{ListOpts: opts})
	})
	if err != nil {
		return nil, cloudkit.ProviderError("listing servers with label "+key+"="+value, err)
	}
	out := make([]provider.Instance, 0, len(servers))
	for _, srv := range servers {
		if cloudkit.Owned(srv.Labels, p.clusterID) && srv.Status != hcloud.ServerStatusDeleting {
			out = append(out, toInstance(srv))
		}
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
