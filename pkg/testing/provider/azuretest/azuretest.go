// Package azuretest is an in-process fake of the part of Azure Resource
// Manager that pkg/provider/azure uses, and of the Microsoft Entra token
// endpoint in front of it, served over TLS by net/http/httptest and spoken
// to by the real SDK (azidentity's client-secret credential, armcompute,
// armnetwork): virtual machines, network interfaces, public IP addresses
// and network security groups (PUT, GET, DELETE, list by resource group),
// as JSON in the SDK's shapes, with ARM's error bodies
// ({"error":{"code","message"}}).
//
// It keeps state like ARM where the provider can tell: a PUT of a new
// resource answers 201 with an Azure-AsyncOperation header that the SDK's
// poller polls until the operation Succeeded (after WithSteps polls) or
// Failed; a PUT of an existing one updates it; names are unique per type
// within the resource group; a NIC, a public IP or a security group in use
// cannot be deleted; a new VM is missing from GETs and listings for a
// while (WithGetLag). The identity's role is assigned on ResourceGroup and
// every call needs one of its actions (Actions, WithActions): a call
// without it is refused 403 AuthorizationFailed, and UsedPermissions tells
// which the provider needed. Tests inject faults through the embedded
// faultkit.Kit: FailNext, RateLimitNext (ARM's 429 with Retry-After),
// SetNoCapacityAs (a size's SkuNotAvailable at once, or AllocationFailed
// in the operation), LoseNextAnswers (the call takes effect and the
// connection drops before the answer), HoldAnswers and SetRandomFaults.
// WithBoot runs something for each VM, such as faultkit.BootForwardProxy.
//
// Public addresses are loopback, so nothing leaves the host.
package azuretest

import (
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// The identity the fake's token endpoint accepts, and where it works.
const (
	TenantID       = "00000000-0000-0000-0000-00000000a2e0"
	ClientID       = "00000000-0000-0000-0000-00000000c11e"
	ClientSecret   = "azuretest-secret-not-a-real-one"
	SubscriptionID = "00000000-0000-0000-0000-0000000000b5"
	ResourceGroup  = "crawl-proxies"
	// SubnetID is the subnet that exists.
	SubnetID = "/subscriptions/" + SubscriptionID + "/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/crawl/subnets/proxies"
	token    = "azuretest-access-token"
)

// Actions are the role's actions the fake grants unless WithActions says
// otherwise: the ones docs/azure.md documents.
var Actions = []string{
	"Microsoft.Compute/virtualMachines/read", "Microsoft.Compute/virtualMachines/write", "Microsoft.Compute/virtualMachines/delete",
	"Microsoft.Compute/locations/operations/read",
	"Microsoft.Network/networkInterfaces/read", "Microsoft.Network/networkInterfaces/write", "Microsoft.Network/networkInterfaces/delete",
	"Microsoft.Network/networkInterfaces/join/action",
	"Microsoft.Network/publicIPAddresses/read", "Microsoft.Network/publicIPAddresses/write", "Microsoft.Network/publicIPAddresses/delete",
	"Microsoft.Network/publicIPAddresses/join/action",
	"Microsoft.Network/networkSecurityGroups/read", "Microsoft.Network/networkSecurityGroups/write", "Microsoft.Network/networkSecurityGroups/delete",
	"Microsoft.Network/networkSecurityGroups/join/action",
	"Microsoft.Network/virtualNetworks/subnets/join/action",
	"Microsoft.Network/locations/operations/read",
}

// Defaults of a new Fake.
var (
	Sizes     = []string{"Standard_B1s", "Standard_B1ms", "Standard_B2s"}
	Locations = []string{"westeurope", "northeurope", "eastus2"}
	// Images are publisher/offer/sku.
	Images = []string{"Debian/debian-12/12-gen2", "Canonical/ubuntu-24_04-lts/server"}
)

// Op names an API operation.
type Op string

// The operations the fake serves.
const (
	PutVM, GetVM, ListVMs, DeleteVM Op = "PutVM", "GetVM", "ListVMs", "DeleteVM"
	PutNIC, GetNIC, DeleteNIC       Op = "PutNIC", "GetNIC", "DeleteNIC"
	PutIP, GetIP, ListIPs, DeleteIP Op = "PutIP", "GetIP", "ListIPs", "DeleteIP"
	PutNSG, GetNSG, ListNSGs        Op = "PutNSG", "GetNSG", "ListNSGs"
	DeleteNSG                       Op = "DeleteNSG"
	GetOperation                    Op = "GetOperation"
)

// Error is an error answer, as ARM sends it.
type Error struct {
	Status  int
	Code    string
	Message string
}

// Common errors, with ARM's codes and messages.
var (
	ErrServerError = Error{Status: 500, Code: "InternalServerError", Message: "An internal server error occurred."}
	ErrUnavailable = Error{Status: 503, Code: "ServiceUnavailable", Message: "The service is temporarily unavailable."}
	ErrQuota       = Error{Status: 409, Code: "OperationNotAllowed", Message: "Operation could not be completed as it results in exceeding approved standardBSFamily Cores quota."}
	ErrRateLimited = Error{Status: http.StatusTooManyRequests, Code: "TooManyRequests", Message: "The request is being throttled."}
)

// VM is a snapshot of a virtual machine.
type VM struct {
	Name     string
	Size     string
	Location string
	Image    string
	State    string // Creating, Succeeded, Failed
	Tags     map[string]string
	UserData string // the custom data, decoded
	NIC      string // the NIC's name
	PublicIP string // the address of the NIC's public IP
	Created  time.Time
}

// String leaves the user-data out: it holds the proxy's credentials.
func (v VM) String() string {
	return fmt.Sprintf("{Name:%s Size:%s State:%s PublicIP:%s Tags:%v}", v.Name, v.Size, v.State, v.PublicIP, v.Tags)
}

// Option configures a Fake.
type Option func(*options)

type options struct {
	steps   int
	getLag  int
	actions []string
	boot    faultkit.BootFunc
}

// WithSteps makes each long-running operation answer InProgress to its
// first n polls.
func WithSteps(n int) Option { return func(o *options) { o.steps = n } }

// WithGetLag hides a new VM from the first n GETs and listings that would
// show it: ARM's reads are eventually consistent.
func WithGetLag(n int) Option { return func(o *options) { o.getLag = n } }

// WithActions grants the identity these actions instead of Actions.
func WithActions(actions ...string) Option { return func(o *options) { o.actions = actions } }

// WithBoot runs boot when a VM's create succeeded (from its custom data),
// and the halt it returns once the VM is deleted.
func WithBoot(boot faultkit.BootFunc) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API, its faults those of the embedded kit, which
// serves it over TLS at URL: the address of both Resource Manager and the
// token endpoint. Its methods are safe for concurrent use.
type Fake struct {
	*faultkit.Kit[Op, Error]
	mu         sync.Mutex
	opts       options
	resources  map[string]*resource // by type/name, type lower case
	operations map[string]*operation
	created    []VM
	nextID     int
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{resources: map[string]*resource{}, operations: map[string]*operation{}, opts: options{actions: Actions}}
	for _, o := range opts {
		o(&f.opts)
	}
	f.Kit = faultkit.New(t, f.routes(), faultkit.Cloud[Op, Error]{
		TLS: true, Write: write, RateLimited: ErrRateLimited, Denied: denied, Random: randomFaults, Boot: f.opts.boot,
	})
	f.Grant(token, faultkit.Credential{
		Permissions: f.opts.actions, Scopes: []string{"/subscriptions/" + SubscriptionID + "/resourceGroups/" + ResourceGroup},
	})
	return f
}

// Transport is the client that trusts the fake's certificate, for the
// SDK's policy.ClientOptions.Transport.
func (f *Fake) Transport() *http.Client { return f.Client() }

// Cloud is the cloud configuration whose authority is the fake's.
func (f *Fake) Cloud() cloud.Configuration {
	return cloud.Configuration{
		ActiveDirectoryAuthorityHost: f.URL + "/",
		Services:                     map[cloud.ServiceName]cloud.ServiceConfiguration{cloud.ResourceManager: {Endpoint: f.URL, Audience: "https://management.core.windows.net/"}},
	}
}

// Credential is azidentity's client-secret credential of the fake's
// identity, getting its tokens from the fake.
func (f *Fake) Credential(t testing.TB) azcore.TokenCredential {
	cred, err := azidentity.NewClientSecretCredential(TenantID, ClientID, ClientSecret, &azidentity.ClientSecretCredentialOptions{
		ClientOptions: policy.ClientOptions{Cloud: f.Cloud(), Transport: f.Transport()},
		// Instance discovery asks login.microsoftonline.com about the
		// authority, as for every authority it does not know.
		DisableInstanceDiscovery: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// Env is the environment that points the operator binary's azure provider
// at the fake: its Resource Manager and authority, and its certificate as
// the trusted roots (Go reads SSL_CERT_FILE).
func (f *Fake) Env(t testing.TB) []string {
	cert := f.Certificate()
	path := filepath.Join(t.TempDir(), "azuretest-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"AZURE_RESOURCE_MANAGER_ENDPOINT=" + f.URL, "AZURE_AUTHORITY_HOST=" + f.URL + "/", "SSL_CERT_FILE=" + path}
}

// VMs are the VMs that exist, by name.
func (f *Fake) VMs() []VM {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []VM
	for _, key := range slices.Sorted(maps.Keys(f.resources)) {
		if r := f.resources[key]; r.kind == kindVM {
			out = append(out, f.vmSnapshot(r))
		}
	}
	return out
}

// Created is every VM ever created (its first PUT), in order.
func (f *Fake) Created() []VM {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

// Resources counts the resources of each kind that exist
// ("virtualMachines", "networkInterfaces", "publicIPAddresses",
// "networkSecurityGroups").
func (f *Fake) Resources() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, r := range f.resources {
		out[r.kind.name]++
	}
	return out
}
