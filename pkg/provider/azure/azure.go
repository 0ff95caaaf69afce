// Package azure is the Azure provider: each Managed proxy instance is a
// virtual machine with a public IPv4 address (its egress IP) and a network
// interface, configured by cloud-init from the kit's user-data
// (pkg/provider/cloudkit) passed as custom data, built from spec.azure with
// the operator's location and subnet as defaults. It speaks to Azure
// Resource Manager only through the official SDK (armcompute, armnetwork,
// azidentity) and is the mapping between that SDK and the kit
// (docs/decisions/0321-azure-idempotent-by-resource-name.md).
//
// Instance IDs are the VMs' names. A name is unique within the resource
// group and a PUT creates or updates the resource of that name, so a
// create is idempotent by name: the VM, its NIC (<name>-nic) and its public
// IP (<name>-ip) are named after the create's key (cloudkit.InstanceName),
// and a create retried after a lost answer or a crash converges on the same
// three resources. Every request, polls of long-running operations
// included, passes one gate (a token bucket under the subscription's
// limit, and any Retry-After a 429 set): it is a policy of the SDK's
// pipeline.
package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v8"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults of Options. Azure Resource Manager refills a subscription's
// buckets at 25 reads and 10 writes a second, buckets of 250 and 200
// ("Understand how Azure Resource Manager throttles requests").
const (
	DefaultRequestsPerSecond = 8.0
	DefaultBurst             = 100
	DefaultMaxAttempts       = 5
	// DefaultRateLimitBackoff is the wait after a 429 that named no time.
	DefaultRateLimitBackoff = 5 * time.Second
	// DefaultPollInterval is the wait between polls of a long-running
	// operation whose answer named none (Azure names one: Retry-After).
	DefaultPollInterval = 5 * time.Second
)

// EndpointEnv names the environment variable that, when set, replaces the
// Resource Manager's address (the operator binary reads it; tests point it
// at azuretest). azidentity reads AZURE_AUTHORITY_HOST the same way.
const EndpointEnv = "AZURE_RESOURCE_MANAGER_ENDPOINT"

// Options configures a Provider.
type Options struct {
	// Credential gets the tokens (azidentity: workload identity, or a
	// client secret; docs/azure.md). Required.
	Credential azcore.TokenCredential
	// SubscriptionID and ResourceGroup are where every resource is made,
	// listed and deleted. Required.
	SubscriptionID, ResourceGroup string
	// ClusterID tags every resource (pxo-cluster-id) and scopes every
	// listing, adoption and deletion to it. Required.
	ClusterID string
	// Location and SubnetID are used when spec.azure leaves them empty.
	Location, SubnetID string
	// Endpoint, when set, is the Resource Manager's address (tests).
	Endpoint string
	// Transport, when set, sends the SDK's requests (tests: the fake's
	// TLS client).
	Transport policy.Transporter
	// RequestsPerSecond and Burst are the gate's token bucket.
	RequestsPerSecond float64
	Burst             int
	// MaxAttempts bounds the attempts of a request that is rate-limited.
	MaxAttempts int
	// RateLimitBackoff is the wait after a 429 that named no time.
	RateLimitBackoff time.Duration
	// PollInterval: see DefaultPollInterval.
	PollInterval time.Duration
	// Clock times Retry-After. Default the real clock.
	Clock clock.Clock
	// Secrets reads the credentials Secret of a Proxy (written into the
	// VM's custom data).
	Secrets provider.SecretReader
}

// Provider runs proxy instances as Azure VMs. It is safe for concurrent use.
type Provider struct {
	vms       *armcompute.VirtualMachinesClient
	nics      *armnetwork.InterfacesClient
	ips       *armnetwork.PublicIPAddressesClient
	nsgs      *armnetwork.SecurityGroupsClient
	group     string
	sub       string
	clusterID string
	location  string
	subnetID  string
	gate      *cloudkit.Gate
	clock     clock.Clock
	poll      time.Duration
	secrets   provider.SecretReader

	// nsgMu keeps the delete of an owned network security group (write
	// lock) from racing a NIC joining it (read lock, from the group's PUT
	// to the NIC's).
	nsgMu sync.RWMutex
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Sweeper  = (*Provider)(nil)
)

// New returns a Provider. It makes no API call.
func New(opts Options) (*Provider, error) {
	switch {
	case opts.Credential == nil:
		return nil, errors.New("azure provider: a credential is required")
	case opts.SubscriptionID == "" || opts.ResourceGroup == "":
		return nil, errors.New("azure provider: a subscription ID and a resource group are required")
	case opts.ClusterID == "":
		return nil, errors.New("azure provider: a cluster ID is required")
	}
	p := &Provider{
		group: opts.ResourceGroup, sub: opts.SubscriptionID, clusterID: opts.ClusterID, location: opts.Location,
		subnetID: opts.SubnetID, clock: opts.Clock, poll: cmpOr(opts.PollInterval, DefaultPollInterval), secrets: opts.Secrets,
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	p.gate = cloudkit.NewGate(cmpOr(opts.RequestsPerSecond, DefaultRequestsPerSecond), cmpOr(opts.Burst, DefaultBurst), p.clock)
	armOpts := &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{
			Transport: opts.Transport,
			// No SDK retries: the gate policy retries a 429 after its
			// Retry-After; the controller's workqueue retries the rest.
			Retry:           policy.RetryOptions{MaxRetries: -1},
			PerCallPolicies: []policy.Policy{gatePolicy{gate: p.gate, clock: p.clock, maxAttempts: cmpOr(opts.MaxAttempts, DefaultMaxAttempts), backoff: cmpOr(opts.RateLimitBackoff, DefaultRateLimitBackoff)}},
			Telemetry:       policy.TelemetryOptions{ApplicationID: "proxy-operator"},
		},
		// Registering resource providers needs */register/action, which
		// the documented role leaves out (docs/azure.md).
		DisableRPRegistration: true,
	}
	if opts.Endpoint != "" {
		armOpts.Cloud = cloud.Configuration{
			ActiveDirectoryAuthorityHost: cloud.AzurePublic.ActiveDirectoryAuthorityHost,
			Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
				cloud.ResourceManager: {Endpoint: opts.Endpoint, Audience: "https://management.core.windows.net/"},
			},
		}
	}
	var err error
	if p.vms, err = armcompute.NewVirtualMachinesClient(p.sub, opts.Credential, armOpts); err == nil {
		if p.nics, err = armnetwork.NewInterfacesClient(p.sub, opts.Credential, armOpts); err == nil {
			if p.ips, err = armnetwork.NewPublicIPAddressesClient(p.sub, opts.Credential, armOpts); err == nil {
				p.nsgs, err = armnetwork.NewSecurityGroupsClient(p.sub, opts.Credential, armOpts)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("azure provider: %w", err)
	}
	return p, nil
}

// cmpOr is v, or def when v is not positive.
func cmpOr[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// gatePolicy sends every request of the SDK's pipeline through the gate
// (cloudkit.Gate.Call): again after each 429, never before the time it
// named, and no request of any worker in between.
type gatePolicy struct {
	gate        *cloudkit.Gate
	clock       clock.Clock
	maxAttempts int
	backoff     time.Duration
}

func (g gatePolicy) Do(req *policy.Request) (*http.Response, error) {
	var resp *http.Response
	var sendErr error
	err := g.gate.Call(req.Raw().Context(), g.maxAttempts, g.backoff, func(ctx context.Context) error {
		if err := req.RewindBody(); err != nil {
			return err
		}
		resp, sendErr = req.Clone(ctx).Next()
		if sendErr == nil && resp.StatusCode == http.StatusTooManyRequests {
			return cloudkit.RateLimited(errors.New("429 Too Many Requests"), cloudkit.RetryAfter(resp.Header, time.Time{}, g.clock.Now()))
		}
		return nil
	})
	if err != nil && cloudkit.KindOf(err) != cloudkit.KindRateLimited {
		return nil, err // the context ended while waiting
	}
	return resp, sendErr // the last answer, a 429 when every attempt got one
}

// poll waits for a long-running operation, polling every p.poll unless
// Azure names another wait.
func pollDone[T any](ctx context.Context, p *Provider, poller *runtime.Poller[T], err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: p.poll})
}

// HeldUntil is the time before which the provider makes no call.
func (p *Provider) HeldUntil() time.Time { return p.gate.NotBefore() }

// Keys of the Secret --azure-credentials-secret names: a service
// principal's client secret, the fallback to workload identity.
const (
	TenantIDKey     = "tenantID"
	ClientIDKey     = "clientID"
	ClientSecretKey = "clientSecret"
)

// Credential is the identity the operator acts as: the service principal
// of secret (TenantIDKey, ClientIDKey, ClientSecretKey) when there is one;
// else workload identity (the environment the AKS workload identity
// webhook sets), tried first by azidentity's default chain. With
// EndpointEnv set (a private cloud, or tests) the authority's instance
// discovery at login.microsoftonline.com is skipped.
func Credential(secret map[string][]byte) (azcore.TokenCredential, error) {
	private := os.Getenv(EndpointEnv) != ""
	if secret == nil {
		return azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{DisableInstanceDiscovery: private})
	}
	key := func(k string) string { return strings.TrimSpace(string(secret[k])) }
	for _, k := range []string{TenantIDKey, ClientIDKey, ClientSecretKey} {
		if key(k) == "" {
			return nil, fmt.Errorf("no key %q", k)
		}
	}
	return azidentity.NewClientSecretCredential(key(TenantIDKey), key(ClientIDKey), key(ClientSecretKey),
		&azidentity.ClientSecretCredentialOptions{DisableInstanceDiscovery: private})
}
