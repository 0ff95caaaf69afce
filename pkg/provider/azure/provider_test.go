package azure_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v8"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/azure"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/azuretest"
)

const clusterID = "test-cluster"

// newProvider is a provider of cluster against fake, authenticated by
// azidentity at the fake's token endpoint, with a bucket that never holds
// a test back.
func newProvider(t *testing.T, fake *azuretest.Fake, cluster string) *azure.Provider {
	t.Helper()
	p, err := azure.New(azure.Options{
		Credential: fake.Credential(t), SubscriptionID: azuretest.SubscriptionID, ResourceGroup: azuretest.ResourceGroup,
		ClusterID: cluster, Location: "westeurope", SubnetID: azuretest.SubnetID, Endpoint: fake.URL, Transport: fake.Transport(),
		RequestsPerSecond: 1000, Burst: 1000, RateLimitBackoff: 10 * time.Millisecond, PollInterval: 5 * time.Millisecond, Secrets: testSecrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testSecrets serves every credentials Secret a test Proxy names.
func testSecrets(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte("s3cret")},
	}, nil
}

func createRequest(uid string, spec *crawlv1alpha1.AzureProvider) provider.CreateRequest {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "crawl", UID: types.UID(uid)},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderAzure, Azure: spec},
	}
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), SpecHash: "h1"}
}

// createUntilDone retries a create the way the controller does, until it
// succeeds or fails other than transiently.
func createUntilDone(t *testing.T, p *azure.Provider, req provider.CreateRequest) provider.Instance {
	t.Helper()
	ctx := t.Context()
	for attempt := 1; ; attempt++ {
		inst, err := p.Create(ctx, req)
		if err == nil {
			return inst
		}
		if provider.Class(err) != provider.ErrTransient || attempt > 8 {
			t.Fatalf("create, attempt %d: %v", attempt, err)
		}
	}
}

// The answers of the VM's create and of a poll are lost while reads lag:
// the retried creates PUT the same names and end on one VM, one NIC and
// one public IP, tagged with the cluster, the Proxy and the spec hash.
func TestCreateConvergesOnOneVMByNameDespiteLostAnswers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t, azuretest.WithSteps(2), azuretest.WithGetLag(2))
	p := newProvider(t, fake, clusterID)
	req := createRequest("00000001-0000-0000-0000-000000000000", nil)
	fake.LoseNextAnswers(azuretest.PutVM, 1)
	if _, err := p.Create(ctx, req); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with its answer lost: %v, want a transient error", err)
	}
	fake.LoseNextAnswers(azuretest.GetOperation, 1)
	inst := createUntilDone(t, p, req)
	created, live := fake.Created(), fake.VMs()
	if len(created) != 1 || len(live) != 1 || inst.ID != live[0].Name {
		t.Fatalf("instance %+v, created %v, live %v: want the one VM", inst, created, live)
	}
	for inst.State != provider.StateRunning {
		var err error
		if inst, err = p.Get(ctx, inst.ID); err != nil && !errors.Is(err, provider.ErrNotFound) {
			t.Fatal(err)
		}
	}
	vm := live[0]
	if inst.IP != vm.PublicIP || inst.Port != 3128 || inst.SpecHash != "h1" || inst.Tags[crawlv1alpha1.TagProxyUID] != string(req.Proxy.UID) {
		t.Errorf("instance %+v of VM %v", inst, vm)
	}
	for k, v := range map[string]string{"pxo-cluster-id": clusterID, "pxo-proxy-uid": string(req.Proxy.UID), "pxo-spec-hash": "h1"} {
		if vm.Tags[k] != v {
			t.Errorf("VM tags %v: want %s=%s", vm.Tags, k, v)
		}
	}
	if !strings.Contains(vm.UserData, "PROXY_AUTH_PASSWORD='s3cret'") || vm.Location != "westeurope" || vm.Size != azure.DefaultVMSize {
		t.Errorf("VM %v: want the kit's user-data, westeurope, %s", vm, azure.DefaultVMSize)
	}
	if diff := cmp.Diff(map[string]int{"virtualMachines": 1, "networkInterfaces": 1, "publicIPAddresses": 1}, fake.Resources()); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}

// SkuNotAvailable at once and AllocationFailed in the operation both move
// the create to the next size; the failed VM the latter leaves is deleted.
// No size with capacity is a quota error naming each.
func TestCreateWalksSizesOnCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t, azuretest.WithSteps(1))
	p := newProvider(t, fake, clusterID)
	sizes := []string{"Standard_B1s", "Standard_B1ms", "Standard_B2s"}
	fake.SetNoCapacityAs(sizes[0], "SkuNotAvailable")
	fake.SetNoCapacityAs(sizes[1], "AllocationFailed")
	if _, err := p.Create(ctx, createRequest("00000002-0000-0000-0000-000000000000", &crawlv1alpha1.AzureProvider{VMSizes: sizes})); err != nil {
		t.Fatal(err)
	}
	if live := fake.VMs(); len(live) != 1 || live[0].Size != sizes[2] || live[0].State != "Succeeded" {
		t.Errorf("live %v, want one %s", live, sizes[2])
	}
	fake.SetNoCapacityAs(sizes[2], "ZonalAllocationFailed")
	_, err := p.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", &crawlv1alpha1.AzureProvider{VMSizes: sizes}))
	if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), sizes[0]) || !strings.Contains(err.Error(), sizes[2]) {
		t.Errorf("no capacity anywhere: %v, want a quota error naming the sizes", err)
	}
	if diff := cmp.Diff(map[string]int{"virtualMachines": 1, "networkInterfaces": 1, "publicIPAddresses": 1}, fake.Resources()); diff != "" {
		t.Errorf("resources after a create with no capacity anywhere (-want +got):\n%s", diff)
	}
}

func TestErrorsNameTheFieldAndClass(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t)
	p := newProvider(t, fake, clusterID)
	badGroup, err := azure.New(azure.Options{Credential: fake.Credential(t), SubscriptionID: azuretest.SubscriptionID, ResourceGroup: "nope",
		ClusterID: clusterID, Location: "westeurope", SubnetID: azuretest.SubnetID, Endpoint: fake.URL, Transport: fake.Transport(), Secrets: testSecrets})
	if err != nil {
		t.Fatal(err)
	}
	otherSubnet := strings.Replace(azuretest.SubnetID, "proxies", "other", 1)
	tests := map[string]struct {
		prov      *azure.Provider
		spec      *crawlv1alpha1.AzureProvider
		fault     *azuretest.Error
		wantClass error
		wantText  string
	}{
		"unknown location": {prov: p, spec: &crawlv1alpha1.AzureProvider{Location: "marsnorth"}, wantClass: provider.ErrPermanent, wantText: "spec.azure.location"},
		"unknown size":     {prov: p, spec: &crawlv1alpha1.AzureProvider{VMSizes: []string{"Standard_Z99"}}, wantClass: provider.ErrPermanent, wantText: "spec.azure.vmSizes"},
		"unknown image":    {prov: p, spec: &crawlv1alpha1.AzureProvider{Image: &crawlv1alpha1.AzureImage{Publisher: "plan9", Offer: "p9", SKU: "4"}}, wantClass: provider.ErrPermanent, wantText: "spec.azure.image"},
		"unknown subnet":   {prov: p, spec: &crawlv1alpha1.AzureProvider{SubnetID: otherSubnet}, wantClass: provider.ErrPermanent, wantText: "spec.azure.subnetID"},
		"bad allowFrom":    {prov: p, spec: &crawlv1alpha1.AzureProvider{AllowFrom: []crawlv1alpha1.CIDR{"gateway"}}, wantClass: provider.ErrPermanent, wantText: "spec.azure.allowFrom[0]"},
		"no group":         {prov: badGroup, wantClass: provider.ErrPermanent, wantText: "--azure-resource-group"},
		"core quota":       {prov: p, fault: &azuretest.ErrQuota, wantClass: provider.ErrQuotaExceeded, wantText: "quota"},
		"no permission":    {prov: p, fault: &azuretest.Error{Status: 403, Code: "AuthorizationFailed", Message: "no"}, wantClass: provider.ErrPermanent, wantText: "docs/azure.md"},
		"server error":     {prov: p, fault: &azuretest.ErrServerError, wantClass: provider.ErrTransient, wantText: "InternalServerError"},
	}
	n := 0
	for name, tc := range tests {
		n++
		uid := fmt.Sprintf("%08d-0004-0000-0000-000000000000", n)
		t.Run(name, func(t *testing.T) {
			if tc.fault != nil {
				fake.FailNext(azuretest.PutVM, *tc.fault)
			}
			_, err := tc.prov.Create(ctx, createRequest(uid, tc.spec))
			if provider.Class(err) != tc.wantClass || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %v (class %v), want class %v naming %q", err, provider.Class(err), tc.wantClass, tc.wantText)
			}
		})
	}
	// A final error deletes what its create made; the server error's NIC
	// and public IP stay for the retry of the same name.
	if diff := cmp.Diff(map[string]int{"networkInterfaces": 1, "publicIPAddresses": 1}, fake.Resources()); diff != "" {
		t.Errorf("left by failing creates (-want +got):\n%s", diff)
	}
}

// A 429 holds back every request of the provider until its Retry-After
// ran out, polls included: the fake counts requests that came early.
func TestRateLimitHoldsEveryCallUntilRetryAfter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t, azuretest.WithSteps(3))
	p := newProvider(t, fake, clusterID)
	first, err := p.Create(ctx, createRequest("00000005-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}
	fake.RateLimitNext(azuretest.PutVM, time.Second)
	start := time.Now()
	created := make(chan error, 1)
	go func() {
		_, err := p.Create(ctx, createRequest("00000006-0000-0000-0000-000000000000", nil))
		created <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); !p.HeldUntil().After(time.Now()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the provider never got the 429")
		}
	}
	if _, err := p.Get(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if early := fake.EarlyCalls(); early != 0 {
		t.Errorf("%d calls before the Retry-After ran out, want 0", early)
	}
	if n := fake.Calls(azuretest.PutVM); n != 3 {
		t.Errorf("%d VM PUTs, want 3 (one, the 429, its retry)", n)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("the retried create returned %v after the 429, before its Retry-After of 1s", waited)
	}
}

// Two clusters share a resource group: neither sees, lists, adopts nor
// deletes the other's VMs. Delete takes the VM, NIC and public IP.
func TestAnotherClustersVMsDoNotExist(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t)
	ours, theirs := newProvider(t, fake, clusterID), newProvider(t, fake, "other-cluster")
	inst, err := theirs.Create(ctx, createRequest("00000007-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ours.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of another cluster's VM: %v, want ErrNotFound", err)
	}
	if err := ours.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete of another cluster's VM: %v", err)
	}
	if listed, err := ours.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil || len(listed) != 0 {
		t.Errorf("ListByTag: %v, %v; want nothing", listed, err)
	}
	if n := len(fake.VMs()); n != 1 {
		t.Errorf("%d VMs, want the other cluster's one untouched", n)
	}
	listed, err := theirs.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(listed) != 1 || listed[0].ID != inst.ID || listed[0].CreatedAt.IsZero() || listed[0].IP == "" {
		t.Errorf("the owner's ListByTag: %+v, %v; want its VM with its creation time and IP", listed, err)
	}
	if err := theirs.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if left := fake.Resources(); len(left) != 0 {
		t.Errorf("left after Delete: %v", left)
	}
}

// allowFrom: one owned security group per port and ranges, shared by the
// VMs that name them, admitting the port from those ranges; deleted with
// the last VM in it, kept while another VM is.
func TestAllowFromOwnsASecurityGroupUntilItsLastVM(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t, azuretest.WithSteps(1))
	p := newProvider(t, fake, clusterID)
	spec := &crawlv1alpha1.AzureProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}}
	a := createUntilDone(t, p, createRequest("0000000a-0000-0000-0000-000000000000", spec))
	b := createUntilDone(t, p, createRequest("0000000b-0000-0000-0000-000000000000", spec))
	if n := fake.Resources()["networkSecurityGroups"]; n != 1 {
		t.Fatalf("%d security groups, want one shared", n)
	}
	if err := p.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if n := fake.Resources()["networkSecurityGroups"]; n != 1 {
		t.Fatalf("%d security groups after the first delete, want it kept for the other VM", n)
	}
	if err := p.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if left := fake.Resources(); len(left) != 0 {
		t.Errorf("left after both deletes: %v", left)
	}
}

// A create cut short after its public IP leaves no VM: ListByTag still
// lists the instance by its public IP, and Delete finishes it.
func TestAPublicIPWithoutItsVMIsListedAndDeleted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t)
	p := newProvider(t, fake, clusterID)
	req := createRequest("0000000c-0000-0000-0000-000000000000", nil)
	fake.FailNext(azuretest.PutVM, azuretest.ErrServerError)
	if _, err := p.Create(ctx, req); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create: %v, want transient", err)
	}
	listed, err := p.ListByTag(ctx, crawlv1alpha1.TagProxyUID, string(req.Proxy.UID))
	if err != nil || len(listed) != 1 {
		t.Fatalf("ListByTag: %+v, %v; want the instance of the public IP", listed, err)
	}
	if err := p.Delete(ctx, listed[0].ID); err != nil {
		t.Fatal(err)
	}
	if left := fake.Resources(); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

// The provider's whole life (create with an owned security group, get,
// list, delete) needs exactly the actions docs/azure.md's role grants,
// and each of them: without one, the call that needs it is refused.
func TestDocumentedRoleSufficesAndEachActionIsNeeded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	life := func(fake *azuretest.Fake) error {
		p := newProvider(t, fake, clusterID)
		inst, err := p.Create(ctx, createRequest("00000009-0000-0000-0000-000000000000", &crawlv1alpha1.AzureProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}}))
		if err != nil {
			return err
		}
		if _, err := p.Get(ctx, inst.ID); err != nil {
			return err
		}
		if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil {
			return err
		}
		return p.Delete(ctx, inst.ID)
	}
	fake := azuretest.New(t, azuretest.WithSteps(1))
	if err := life(fake); err != nil {
		t.Fatalf("with the documented role: %v", err)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(azuretest.Actions)), fake.UsedPermissions()); diff != "" {
		t.Errorf("actions used (-documented +used):\n%s", diff)
	}
	for _, missing := range azuretest.Actions {
		rest := slices.DeleteFunc(slices.Clone(azuretest.Actions), func(a string) bool { return a == missing })
		err := life(azuretest.New(t, azuretest.WithSteps(1), azuretest.WithActions(rest...)))
		if provider.Class(err) != provider.ErrPermanent || !strings.Contains(err.Error(), missing) {
			t.Errorf("without %s: %v, want a permanent error naming it", missing, err)
		}
	}
}

// A create retried after a lost answer, while reads still hide the VM it
// made, PUTs that VM again: Resource Manager refuses a changed OS profile
// (PropertyChangeNotAllowed, as the fake does), so the retry must send the
// same SSH key and custom data, and is accepted.
func TestRetriedCreateSendsTheSameOSProfile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t, azuretest.WithGetLag(10))
	p := newProvider(t, fake, clusterID)
	req := createRequest("00000002-0000-0000-0000-000000000000", nil)
	fake.LoseNextAnswers(azuretest.PutVM, 1)
	if _, err := p.Create(ctx, req); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with its answer lost: %v, want a transient error", err)
	}
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatalf("retried create: %v, want the VM's PUT accepted", err)
	}
	if n := len(fake.Created()); n != 1 {
		t.Errorf("%d VMs created, want 1", n)
	}
}

// A delete whose security-group step failed, retried, finds the NIC gone
// and with it the group's ID: the group is left behind. Sweep, which the
// orphan collector calls each pass, deletes the unused groups this cluster
// owns and keeps another cluster's.
func TestSweepDeletesTheSecurityGroupADeleteLeftBehind(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t)
	ours, theirs := newProvider(t, fake, clusterID), newProvider(t, fake, "another-cluster")
	spec := &crawlv1alpha1.AzureProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}}
	for i, p := range []*azure.Provider{ours, theirs} {
		inst := createUntilDone(t, p, createRequest(fmt.Sprintf("0000000%d-0000-0000-0000-00000000000d", i), spec))
		fake.FailNext(azuretest.GetNSG, azuretest.ErrServerError)
		if err := p.Delete(ctx, inst.ID); err == nil {
			t.Fatal("delete with its security group's read failing: no error")
		}
		if err := p.Delete(ctx, inst.ID); err != nil {
			t.Fatalf("retried delete: %v", err)
		}
	}
	if diff := cmp.Diff(map[string]int{"networkSecurityGroups": 2}, fake.Resources()); diff != "" {
		t.Fatalf("before the sweep, want both clusters' groups left (-want +got):\n%s", diff)
	}
	if n, err := ours.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want our one group deleted", n, err)
	}
	if diff := cmp.Diff(map[string]int{"networkSecurityGroups": 1}, fake.Resources()); diff != "" {
		t.Errorf("after our sweep, want the other cluster's group kept (-want +got):\n%s", diff)
	}
	if n, err := theirs.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("the other cluster's Sweep: %d, %v; want its group deleted", n, err)
	}
}

// TestSweepKeepsASecurityGroupItDidNotMake: a security group someone else
// made in the resource group, carrying this cluster's tag (copied by their
// tooling, say) and in no NIC, is not one the operator made for allowFrom:
// the sweep leaves it, and still deletes the group it made and left behind.
func TestSweepKeepsASecurityGroupItDidNotMake(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := azuretest.New(t)
	p := newProvider(t, fake, clusterID)
	nsgs, err := armnetwork.NewSecurityGroupsClient(azuretest.SubscriptionID, fake.Credential(t), &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{Cloud: fake.Cloud(), Transport: fake.Transport()}, DisableRPRegistration: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	poller, err := nsgs.BeginCreateOrUpdate(ctx, azuretest.ResourceGroup, "crawlers-nsg", armnetwork.SecurityGroup{
		Location: to.Ptr("westeurope"), Tags: map[string]*string{"pxo-cluster-id": to.Ptr(clusterID)},
	}, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 5 * time.Millisecond})
	}
	if err != nil {
		t.Fatal(err)
	}
	inst := createUntilDone(t, p, createRequest("00000001-0000-0000-0000-00000000000e", &crawlv1alpha1.AzureProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}}))
	fake.FailNext(azuretest.GetNSG, azuretest.ErrServerError)
	if err := p.Delete(ctx, inst.ID); err == nil {
		t.Fatal("delete with its security group's read failing: no error")
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	if n, err := p.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("Sweep: %d, %v; want the one group it made deleted", n, err)
	}
	if _, err := nsgs.Get(ctx, azuretest.ResourceGroup, "crawlers-nsg", nil); err != nil {
		t.Errorf("the group the operator did not make: %v, want it kept", err)
	}
}
