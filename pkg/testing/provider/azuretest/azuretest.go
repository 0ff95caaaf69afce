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
// while (WithGetLag). Every call needs an action of the identity's role
// (Actions, WithActions): a call without it is refused 403
// AuthorizationFailed, and UsedActions tells which the provider needed.
// Tests inject faults: FailNext, RateLimitNext (a 429 with Retry-After,
// and a count of the calls that came before it ran out), SetNoCapacity
// (a size's SkuNotAvailable at once, or AllocationFailed in the
// operation), LoseNextAnswers (the call takes effect and the connection
// drops before the answer), HoldAnswers, and SetRandomFaults. WithBoot
// runs something (a real forward proxy) for each VM, as hcloudtest does.
//
// Public addresses are loopback, so nothing leaves the host.
package azuretest

import (
	"encoding/pem"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
	// RetryAfter, on a 429, is sent as Retry-After (whole seconds).
	RetryAfter time.Duration
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
	boot    func(VM) (halt func())
}

// WithSteps makes each long-running operation answer InProgress to its
// first n polls.
func WithSteps(n int) Option { return func(o *options) { o.steps = n } }

// WithGetLag hides a new VM from the first n GETs and listings that would
// show it: ARM's reads are eventually consistent.
func WithGetLag(n int) Option { return func(o *options) { o.getLag = n } }

// WithActions grants the identity these actions instead of Actions.
func WithActions(actions ...string) Option { return func(o *options) { o.actions = actions } }

// WithBoot runs boot when a VM's create succeeded, and the halt it returns
// once the VM is deleted. boot must not block.
func WithBoot(boot func(VM) (halt func())) Option { return func(o *options) { o.boot = boot } }

// Fake is the fake API. Its methods are safe for concurrent use.
type Fake struct {
	// URL is the address of both Resource Manager and the token endpoint.
	URL string

	srv         *httptest.Server
	mu          sync.Mutex
	opts        options
	resources   map[string]*resource // by type/name, type lower case
	operations  map[string]*operation
	created     []VM
	nextID      int
	calls       map[Op]int
	usedActions map[string]bool
	faults      map[Op][]Error
	lost        map[Op]int
	holds       map[Op]chan struct{}
	noCap       map[string]string
	random      *rand.Rand
	rate        float64
	notBefore   time.Time
	earlyCalls  int
}

// New starts a Fake; it stops with the test.
func New(t testing.TB, opts ...Option) *Fake {
	f := &Fake{
		resources: map[string]*resource{}, operations: map[string]*operation{}, calls: map[Op]int{}, usedActions: map[string]bool{},
		faults: map[Op][]Error{}, lost: map[Op]int{}, holds: map[Op]chan struct{}{}, noCap: map[string]string{},
		opts: options{actions: Actions},
	}
	for _, o := range opts {
		o(&f.opts)
	}
	f.srv = httptest.NewTLSServer(f.routes())
	f.URL = f.srv.URL
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.resources {
			if r.halt != nil {
				r.halt()
			}
		}
	})
	return f
}

// Transport is the client that trusts the fake's certificate, for the
// SDK's policy.ClientOptions.Transport.
func (f *Fake) Transport() *http.Client { return f.srv.Client() }

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
	cert := f.srv.TLS.Certificates[0]
	path := filepath.Join(t.TempDir(), "azuretest-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"AZURE_RESOURCE_MANAGER_ENDPOINT=" + f.URL, "AZURE_AUTHORITY_HOST=" + f.URL + "/", "SSL_CERT_FILE=" + path}
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
// 429 ran out.
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

// SetNoCapacity makes creates of size fail with code: SkuNotAvailable is
// answered at once (409), AllocationFailed and ZonalAllocationFailed by
// the operation, which leaves a failed VM. "" makes the size available.
func (f *Fake) SetNoCapacity(size, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noCap[size] = code
}

// SetRandomFaults makes a share rate of all calls fail, drawn from seed:
// 429s, server errors and unavailability before any effect, capacity
// errors on VM creates, and lost answers after the effect. Rate 0 stops them.
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

// UsedActions are the actions the calls so far needed, sorted.
func (f *Fake) UsedActions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.usedActions))
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
