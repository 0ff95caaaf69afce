// Package digitalocean is the DigitalOcean provider: each Managed proxy
// instance is a droplet with a public IPv4 address (its egress IP),
// configured by cloud-init from the kit's user-data (pkg/provider/cloudkit),
// built from spec.digitalocean with the operator's region as the default.
// It speaks to DigitalOcean only through the official SDK (godo) and is the
// mapping between that SDK and the kit
// (docs/decisions/0320-digitalocean-adoption-by-tag.md).
//
// Instance IDs are the droplets' numeric IDs. Droplet names are not unique,
// so a create is made idempotent by tag: each droplet carries its create's
// idempotency key as a tag (pxo:key:…), and a create first lists the
// droplets with that tag and adopts one (deleting any second one). The
// listing may miss a droplet made a moment ago, so after a create whose
// answer was lost the provider waits SettleTime for it to be listed before
// it creates again; a droplet that still slips through (a crash in that
// window) is a duplicate the orphan collector deletes (pkg/gc). Every call
// passes one gate (a token bucket under the account's rate limit, and any
// Retry-After a 429 set).
package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/godo"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults of Options. DigitalOcean allows 5,000 requests an hour and 250
// a minute per token (API reference, "Rate Limit"): about 1.4 a second.
const (
	DefaultRequestsPerSecond = 1.0
	DefaultBurst             = 60
	DefaultMaxAttempts       = 5
	// DefaultRateLimitBackoff is the wait after a 429 that named no time.
	DefaultRateLimitBackoff = 2 * time.Second
	// DefaultSettleTime is how long a create whose answer was lost waits
	// for its droplet to show in the listing by tag before creating again.
	DefaultSettleTime = 30 * time.Second
)

// EndpointEnv names the environment variable that, when set, replaces the
// API's address (the operator binary reads it; tests point it at dotest).
const EndpointEnv = "DIGITALOCEAN_API_URL"

// TokenSecretKey is the key of the API token in the Secret
// --digitalocean-token-secret names.
const TokenSecretKey = "token"

// Options configures a Provider.
type Options struct {
	// Token is a DigitalOcean API token with the scopes docs/digitalocean.md
	// lists. Required. Secret.
	Token string
	// ClusterID tags every droplet (pxo:cluster-id:…) and scopes every
	// listing, adoption and deletion to it. Required.
	ClusterID string
	// Region is used when spec.digitalocean.region is empty.
	Region string
	// Endpoint, when set, is where every API request goes (tests).
	Endpoint string
	// HTTPClient, when set, sends the SDK's requests.
	HTTPClient *http.Client
	// RequestsPerSecond and Burst are the gate's token bucket.
	RequestsPerSecond float64
	Burst             int
	// MaxAttempts bounds the attempts of a call that is rate-limited.
	MaxAttempts int
	// RateLimitBackoff is the wait after a 429 that named no time.
	RateLimitBackoff time.Duration
	// SettleTime: see DefaultSettleTime.
	SettleTime time.Duration
	// Clock times Retry-After and SettleTime. Default the real clock.
	Clock clock.Clock
	// Secrets reads the credentials Secret of a Proxy (written into the
	// droplet's user-data).
	Secrets provider.SecretReader
}

// Provider runs proxy instances as droplets. It is safe for concurrent use.
type Provider struct {
	client      *godo.Client
	clusterID   string
	region      string
	gate        *cloudkit.Gate
	clock       clock.Clock
	maxAttempts int
	backoff     time.Duration
	settle      time.Duration
	secrets     provider.SecretReader

	mu sync.Mutex
	// unsettled holds the key tags of creates whose answer was lost, and
	// when: their droplet may exist and not be listed yet.
	unsettled map[string]time.Time
	// firewalls: when a create last used each owned firewall (by key),
	// for those known to exist; Sweep keeps one used within the settle
	// time, as the tag listing may not show its droplet yet.
	firewalls map[string]time.Time
	// firewallUse is held (read) by a create from its firewall's check to
	// its droplet's create, and (write) by Sweep from its check that a
	// firewall is unused to its delete.
	firewallUse sync.RWMutex
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Sweeper  = (*Provider)(nil)
)

// New returns a Provider. It makes no API call.
func New(opts Options) (*Provider, error) {
	switch {
	case opts.Token == "":
		return nil, errors.New("digitalocean provider: an API token is required")
	case opts.ClusterID == "":
		return nil, errors.New("digitalocean provider: a cluster ID is required")
	}
	httpClient := opts.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: time.Minute}
	}
	authed := *httpClient
	authed.Transport = bearer{token: opts.Token, base: httpClient.Transport}
	// No godo retries (RetryConfig): the gate retries rate-limited calls
	// after their Retry-After; the controller's workqueue retries the rest.
	clientOpts := []godo.ClientOpt{godo.SetUserAgent("proxy-operator")}
	if opts.Endpoint != "" {
		clientOpts = append(clientOpts, godo.SetBaseURL(strings.TrimSuffix(opts.Endpoint, "/")+"/"))
	}
	client, err := godo.New(&authed, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("digitalocean provider: %w", err)
	}
	p := &Provider{
		client: client, clusterID: opts.ClusterID, region: opts.Region, clock: opts.Clock,
		maxAttempts: opts.MaxAttempts, backoff: opts.RateLimitBackoff, settle: opts.SettleTime,
		secrets: opts.Secrets, unsettled: map[string]time.Time{}, firewalls: map[string]time.Time{},
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	p.maxAttempts = cmpOr(p.maxAttempts, DefaultMaxAttempts)
	p.backoff = cmpOr(p.backoff, DefaultRateLimitBackoff)
	p.settle = cmpOr(p.settle, DefaultSettleTime)
	p.gate = cloudkit.NewGate(cmpOr(opts.RequestsPerSecond, DefaultRequestsPerSecond), cmpOr(opts.Burst, DefaultBurst), p.clock)
	return p, nil
}

// cmpOr is v, or def when v is not positive.
func cmpOr[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// bearer sends the token on every request. It never logs.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.base == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return b.base.RoundTrip(r)
}

// call runs one API call through the gate (cloudkit.Gate.Call): again
// after each 429, never before the time it named. It returns the
// classified error.
func (p *Provider) call(ctx context.Context, api func(ctx context.Context) (*godo.Response, error)) error {
	return p.gate.Call(ctx, p.maxAttempts, p.backoff, func(ctx context.Context) error {
		resp, err := api(ctx)
		now := p.clock.Now()
		if resp != nil && resp.Rate.Limit > 0 && resp.Rate.Remaining == 0 {
			p.gate.Defer(resp.Rate.Reset.Time) // the token's hourly bucket is empty
		}
		if err == nil {
			return nil
		}
		return classify(err, resp, now)
	})
}

// HeldUntil is the time before which the provider makes no call.
func (p *Provider) HeldUntil() time.Time { return p.gate.NotBefore() }
