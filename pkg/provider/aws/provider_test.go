package aws_test

// These tests drive the real aws-sdk-go-v2 client (signing, the EC2 Query
// serializer, XML decoding, the retryer) against ec2test, the EC2 fake.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

const (
	region       = "eu-west-1"
	clusterID    = "cluster-a"
	testPassword = "pr0xy-Pa55word'quote"
)

// testSecrets serves every credentials Secret a test Proxy names.
func testSecrets(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte(testPassword)},
	}, nil
}

// otherClusterKey signs the calls of a second cluster's operator in the
// same account; tests under the documented policy give it that cluster's
// copy of the policy (ec2test.WithPrincipal).
const otherClusterKey = "AKIAEC2TESTCLUSTERB1"

// asOtherCluster makes a Provider the operator of cluster-b, with its own
// identity.
func asOtherCluster(o *aws.Options) {
	o.ClusterID = "cluster-b"
	o.Credentials = credentials.NewStaticCredentialsProvider(otherClusterKey, ec2test.SecretAccessKey, "")
}

func newProvider(t *testing.T, fake *ec2test.Server, change ...func(*aws.Options)) *aws.Provider {
	t.Helper()
	opts := aws.Options{
		Region: region, ClusterID: clusterID, BaseEndpoint: fake.URL, Secrets: testSecrets,
		Credentials:     credentials.NewStaticCredentialsProvider(ec2test.AccessKeyID, ec2test.SecretAccessKey, ""),
		ThrottleBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
	}
	for _, c := range change {
		c(&opts)
	}
	p, err := aws.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func uid(i int) types.UID { return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)) }

func testProxy(i int, change ...func(*crawlv1alpha1.AWSProvider)) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: fmt.Sprintf("proxy-%d", i), UID: uid(i)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderAWS,
			AWS:  &crawlv1alpha1.AWSProvider{},
			Auth: &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}},
		},
	}
	for _, c := range change {
		c(p.Spec.AWS)
	}
	return p
}

func request(p *crawlv1alpha1.Proxy, specHash string) provider.CreateRequest {
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), SpecHash: specHash, CloudInit: []byte("#cloud-config\npackages: [squid]\n")}
}

func TestCreateRunsThenDeleteTerminates(t *testing.T) {
	fake := ec2test.New(t)
	p := newProvider(t, fake)
	ctx := context.Background()
	proxy := testProxy(1, func(a *crawlv1alpha1.AWSProvider) {
		a.Port = 8080
		a.SubnetIDs = []string{"subnet-0b0b0b0b0b0b0b0b0"}
		a.SecurityGroupIDs = ec2test.DefaultSecurityGroups
	})

	inst, err := p.Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inst.ID, region+"/i-") || inst.State != provider.StateProvisioning {
		t.Fatalf("Create = %+v, want a Provisioning instance in %s", inst, region)
	}
	if got, err := p.Get(ctx, inst.ID); err != nil || got.State != provider.StateProvisioning {
		t.Fatalf("first Get = %+v, %v; want Provisioning (pending)", got, err)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.IsZero() || time.Since(got.CreatedAt) > time.Minute {
		t.Errorf("Get = CreatedAt %v, want the launch time", got.CreatedAt)
	}
	want := provider.Instance{ID: inst.ID, State: provider.StateRunning, IP: "127.0.100.1", Port: 8080, Tags: provider.Tags(proxy), SpecHash: "hash-1", CreatedAt: got.CreatedAt}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	live := fake.Live()
	if len(live) != 1 {
		t.Fatalf("%d live instances, want 1", len(live))
	}
	in := live[0]
	if in.HTTPTokens != "required" || in.Subnet != "subnet-0b0b0b0b0b0b0b0b0" || in.InstanceType != aws.DefaultInstanceType ||
		in.ImageID != ec2test.DefaultImages[0] || in.Spot || in.Tags[aws.TagClusterID] != clusterID {
		t.Errorf("launched %+v: want IMDSv2 required, the subnet, %s, the default image resolved, on-demand, tagged with the cluster", in, aws.DefaultInstanceType)
	}
	for _, part := range []string{"packages: [squid]", "PROXY_PORT=8080", `PROXY_AUTH_PASSWORD='pr0xy-Pa55word'\\''quote'`, aws.EnvFile} {
		if !strings.Contains(in.UserData, part) {
			t.Errorf("user-data lacks %q:\n%s", part, in.UserData)
		}
	}

	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, inst.ID); err != nil || got.State != provider.StateStopped {
		t.Errorf("Get after Delete = %+v, %v; want Stopped (shutting-down)", got, err)
	}
	if _, err := p.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of a terminated instance: %v, want ErrNotFound", err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete of a terminated instance: %v, want nil", err)
	}
}

// An operator killed between RunInstances and its status write creates
// again: the client token brings back the same instance. A replacement from
// the same spec gets a new one.
func TestCreateIsIdempotentAcrossRestarts(t *testing.T) {
	fake := ec2test.New(t)
	ctx := context.Background()
	proxy := testProxy(2)

	first, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	restarted := newProvider(t, fake)
	again, err := restarted.Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || len(fake.Instances()) != 1 {
		t.Fatalf("create after a restart = %s (%d instances), want %s and 1 instance", again.ID, len(fake.Instances()), first.ID)
	}

	// The instance is interrupted and gone; the same spec needs a new one.
	ec2ID := strings.TrimPrefix(first.ID, region+"/")
	if err := fake.SetState(ec2ID, "terminated", "Server.SpotInstanceTermination"); err != nil {
		t.Fatal(err)
	}
	replacement, err := restarted.Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if replacement.ID == first.ID {
		t.Fatalf("the replacement reused the terminated instance %s", first.ID)
	}
	// And a third operator, with no memory, finds the replacement, not a third.
	third, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if third.ID != replacement.ID || len(fake.Live()) != 1 || len(fake.Instances()) != 2 {
		t.Errorf("create after another restart = %s, %d live of %d; want %s, 1 of 2", third.ID, len(fake.Live()), len(fake.Instances()), replacement.ID)
	}
}

// A create that walks to another place launches under another client
// token: it must first adopt what an earlier attempt launched. Here the
// first operator launched in the second subnet (the first had no
// capacity) and died before its status write; its successor finds the
// first subnet has room again, and must not launch there.
func TestCreateAdoptsWhatAnEarlierAttemptLaunched(t *testing.T) {
	subnets := []string{"subnet-0a0a0a0a0a0a0a0a0", "subnet-0b0b0b0b0b0b0b0b0"}
	ctx := context.Background()
	fake := ec2test.New(t)
	proxy := testProxy(6, func(a *crawlv1alpha1.AWSProvider) { a.SubnetIDs = subnets })
	first := launchOrderSubnet(t, proxy)
	fake.SetNoCapacity(first, true)
	launched, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	fake.SetNoCapacity(first, false)

	adopted, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if adopted.ID != launched.ID || len(fake.Instances()) != 1 {
		t.Errorf("create after a restart = %s (%d instances launched); want %s, the one launched before, and no other", adopted.ID, len(fake.Instances()), launched.ID)
	}
}

// Two live instances of one Proxy (one from an older spec): a create
// adopts the one of its spec and terminates the other.
func TestCreateTerminatesASecondInstance(t *testing.T) {
	ctx := context.Background()
	fake := ec2test.New(t, ec2test.WithInvisibleCalls(1))
	proxy := testProxy(7)
	old, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-old"))
	if err != nil {
		t.Fatal(err)
	}
	// Launched while the first was still hidden from describes.
	current, err := newProvider(t, fake).Create(ctx, request(proxy, "hash-new"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.Live()) != 2 {
		t.Fatalf("%d live instances, want the two the test set up", len(fake.Live()))
	}
	p := newProvider(t, fake)
	if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil { // both visible from now on
		t.Fatal(err)
	}
	adopted, err := p.Create(ctx, request(proxy, "hash-new"))
	if err != nil {
		t.Fatal(err)
	}
	if adopted.ID != current.ID {
		t.Errorf("create adopted %s, want %s (built from the current spec), not %s", adopted.ID, current.ID, old.ID)
	}
	states := map[string]string{}
	for _, in := range fake.Instances() {
		states[region+"/"+in.ID] = in.State
	}
	if states[old.ID] != "shutting-down" || len(fake.Instances()) != 2 {
		t.Errorf("instances %v: want %s terminated and nothing launched", states, old.ID)
	}
}

// Handed the ID of another cluster's instance (sharing the account), the
// provider neither sees nor terminates it.
func TestAnotherClustersInstanceIsNeverTouched(t *testing.T) {
	ctx := context.Background()
	fake := ec2test.New(t, ec2test.WithPrincipal(otherClusterKey, nil))
	theirs, err := newProvider(t, fake, asOtherCluster).Create(ctx, request(testProxy(8), "h"))
	if err != nil {
		t.Fatal(err)
	}
	ours := newProvider(t, fake)
	if _, err := ours.Get(ctx, theirs.ID); !errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), `cluster "cluster-b"`) {
		t.Errorf("Get of another cluster's instance = %v, want ErrNotFound naming its cluster", err)
	}
	if err := ours.Delete(ctx, theirs.ID); err != nil {
		t.Errorf("Delete of another cluster's instance = %v, want nil (nothing of ours to delete)", err)
	}
	if live := fake.Live(); len(live) != 1 || live[0].State == "shutting-down" {
		t.Errorf("live %+v: another cluster's Delete terminated it", live)
	}
}

// launchOrderSubnet is the subnet a create of proxy tries first, found by
// launching it on a scratch fake.
func launchOrderSubnet(t *testing.T, proxy *crawlv1alpha1.Proxy) string {
	t.Helper()
	scratch := ec2test.New(t)
	if _, err := newProvider(t, scratch).Create(context.Background(), request(proxy, "scratch")); err != nil {
		t.Fatal(err)
	}
	return scratch.Live()[0].Subnet
}

func TestCreateFallsBackOverInstanceTypesAndSubnets(t *testing.T) {
	subnets := []string{"subnet-0a0a0a0a0a0a0a0a0", "subnet-0b0b0b0b0b0b0b0b0"}
	spec := func(a *crawlv1alpha1.AWSProvider) {
		a.InstanceTypes = []string{"t3.micro", "t3a.micro"}
		a.SubnetIDs = subnets
	}
	ctx := context.Background()

	t.Run("next subnet, then next type", func(t *testing.T) {
		fake := ec2test.New(t)
		fake.SetNoCapacity(subnets[0], true)
		fake.SetNoCapacity("t3.micro", true)
		if _, err := newProvider(t, fake).Create(ctx, request(testProxy(3, spec), "h")); err != nil {
			t.Fatal(err)
		}
		got := fake.Live()[0]
		if got.InstanceType != "t3a.micro" || got.Subnet != subnets[1] {
			t.Errorf("launched %s in %s, want t3a.micro in %s", got.InstanceType, got.Subnet, subnets[1])
		}
		// Each place is tried once at most: capacity errors are not the
		// SDK's to retry (it would make five attempts at each).
		if n := fake.Calls(ec2test.RunInstances); n < 3 || n > 4 {
			t.Errorf("%d RunInstances calls, want 3 or 4 (two types × two subnets, from the UID's subnet)", n)
		}
	})
	t.Run("no capacity anywhere is a quota error", func(t *testing.T) {
		fake := ec2test.New(t)
		fake.SetNoCapacity("t3.micro", true)
		fake.SetNoCapacity("t3a.micro", true)
		_, err := newProvider(t, fake).Create(ctx, request(testProxy(4, spec), "h"))
		if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
			t.Errorf("Create = %v, want a quota error naming InsufficientInstanceCapacity", err)
		}
	})
	t.Run("unsupported everywhere is permanent", func(t *testing.T) {
		fake := ec2test.New(t)
		fake.SetUnsupported("t3.micro", true)
		fake.SetUnsupported("t3a.micro", true)
		_, err := newProvider(t, fake).Create(ctx, request(testProxy(5, spec), "h"))
		if !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("Create = %v, want a permanent error", err)
		}
	})
}

func TestEventualConsistency(t *testing.T) {
	fake := ec2test.New(t, ec2test.WithInvisibleCalls(2))
	p := newProvider(t, fake)
	ctx := context.Background()
	inst, err := p.Create(ctx, request(testProxy(6), "h"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateProvisioning {
		t.Errorf("Get of an instance EC2 does not know yet = %+v, %v; want Provisioning", got, err)
	}
	if err := p.Delete(ctx, inst.ID); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("Delete of an instance EC2 does not know yet = %v, want a transient error (retry, or it leaks)", err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete once EC2 knows it: %v", err)
	}
	if live := fake.Live(); len(live) != 1 || live[0].State != "shutting-down" {
		t.Errorf("instances after the delete: %+v, want one shutting-down", live)
	}
	// Another operator, with no memory of the launch, reads its absence as gone.
	fake2 := ec2test.New(t, ec2test.WithInvisibleCalls(1))
	inst2, err := newProvider(t, fake2).Create(ctx, request(testProxy(7), "h"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newProvider(t, fake2).Get(ctx, inst2.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get without memory of the launch = %v, want ErrNotFound", err)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		faults []ec2test.Error
		spec   func(*crawlv1alpha1.AWSProvider)
		want   error
		calls  int
	}{
		{name: "throttled twice, then launched", faults: []ec2test.Error{ec2test.ErrRequestLimitExceeded, ec2test.ErrRequestLimitExceeded}, calls: 3},
		{name: "throttled past the retryer", faults: repeat(ec2test.ErrRequestLimitExceeded, aws.DefaultMaxAttempts), want: provider.ErrTransient, calls: aws.DefaultMaxAttempts},
		{name: "server error past the retryer", faults: repeat(ec2test.ErrInternal, aws.DefaultMaxAttempts), want: provider.ErrTransient, calls: aws.DefaultMaxAttempts},
		{name: "instance limit", faults: []ec2test.Error{ec2test.ErrInstanceLimitExceeded}, want: provider.ErrQuotaExceeded, calls: 1},
		{name: "unknown AMI", spec: func(a *crawlv1alpha1.AWSProvider) { a.Image = &crawlv1alpha1.AWSImage{ID: "ami-00000000000000000"} }, want: provider.ErrPermanent, calls: 1},
		{name: "unknown subnet", spec: func(a *crawlv1alpha1.AWSProvider) { a.SubnetIDs = []string{"subnet-0c0c0c0c0c0c0c0c0"} }, want: provider.ErrPermanent, calls: 1},
		{name: "unauthorized", faults: []ec2test.Error{{Status: 403, Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."}}, want: provider.ErrPermanent, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := ec2test.New(t)
			fake.FailNext(ec2test.RunInstances, tc.faults...)
			proxy := testProxy(8)
			if tc.spec != nil {
				tc.spec(proxy.Spec.AWS)
			}
			_, err := newProvider(t, fake).Create(ctx, request(proxy, "h"))
			if tc.want == nil && err != nil || tc.want != nil && provider.Class(err) != tc.want {
				t.Errorf("Create = %v, want class %v", err, tc.want)
			}
			if n := fake.Calls(ec2test.RunInstances); n != tc.calls {
				t.Errorf("%d RunInstances calls, want %d", n, tc.calls)
			}
		})
	}
}

// TestUnmarkedCredentialsNeverReachUserData: a Secret not marked for
// proxies (docs/decisions/0230-credentials-secrets-opt-in-by-label.md) is
// refused before any EC2 call, so its password is in no instance's
// user-data; the error names the field, never the password.
func TestUnmarkedCredentialsNeverReachUserData(t *testing.T) {
	fake := ec2test.New(t)
	p := newProvider(t, fake, func(o *aws.Options) {
		o.Secrets = func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			s, err := testSecrets(ctx, namespace, name)
			s.Labels = nil
			return s, err
		}
	})
	_, err := p.Create(context.Background(), request(testProxy(9), "h"))
	if err == nil || provider.Class(err) != provider.ErrTransient || !strings.Contains(err.Error(), `spec.auth.secretRef: Secret "creds" is not marked for proxy use`) {
		t.Errorf("Create = %v, want a transient error naming spec.auth.secretRef", err)
	}
	if strings.Contains(fmt.Sprint(err), testPassword) {
		t.Errorf("the error holds the password: %v", err)
	}
	if n := fake.Calls(ec2test.RunInstances); n != 0 || len(fake.Instances()) != 0 {
		t.Errorf("%d RunInstances calls, %d instances; want none", n, len(fake.Instances()))
	}
}

func repeat(e ec2test.Error, n int) []ec2test.Error {
	out := make([]ec2test.Error, n)
	for i := range out {
		out[i] = e
	}
	return out
}

func TestListByTagPagesAndStaysInItsCluster(t *testing.T) {
	fake := ec2test.New(t, ec2test.WithPageSize(2))
	ours := newProvider(t, fake)
	theirs := newProvider(t, fake, func(o *aws.Options) { o.ClusterID = "cluster-b" })
	ctx := context.Background()
	var want []string
	for i := range 5 {
		inst, err := ours.Create(ctx, request(testProxy(10+i), "h"))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, inst.ID)
	}
	if _, err := theirs.Create(ctx, request(testProxy(20), "h")); err != nil {
		t.Fatal(err)
	}
	if err := ours.Delete(ctx, want[4]); err != nil {
		t.Fatal(err)
	}
	got, err := ours.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, inst := range got {
		ids = append(ids, inst.ID)
	}
	// The shutting-down one is still listed (it is not gone yet).
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ListByTag (-want +got):\n%s", diff)
	}
}

func TestSpotInstances(t *testing.T) {
	fake := ec2test.New(t)
	p := newProvider(t, fake)
	ctx := context.Background()
	proxy := testProxy(30, func(a *crawlv1alpha1.AWSProvider) { a.Spot = &crawlv1alpha1.AWSSpot{MaxPrice: "0.0040"} })
	inst, err := p.Create(ctx, request(proxy, "h"))
	if err != nil {
		t.Fatal(err)
	}
	if !fake.Live()[0].Spot {
		t.Fatal("the instance is not a Spot instance")
	}
	ec2ID := strings.TrimPrefix(inst.ID, region+"/")
	if _, err := p.Get(ctx, inst.ID); err != nil { // pending
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, inst.ID); err != nil || got.State != provider.StateRunning || got.Interruption != "" || !got.Interruptible {
		t.Fatalf("Get of a Spot instance = %+v, %v; want Running, interruptible, without a notice", got, err)
	}
	if err := fake.Interrupt(ec2ID); err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateRunning || got.Interruption != "Spot interruption notice (marked-for-termination)" {
		t.Errorf("Get after an interruption notice = %+v, %v; want Running with the notice", got, err)
	}
	if err := fake.SetState(ec2ID, "shutting-down", "Server.SpotInstanceTermination"); err != nil {
		t.Fatal(err)
	}
	got, err = p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateStopped || !strings.Contains(got.Message, "Server.SpotInstanceTermination") {
		t.Errorf("Get of an interrupted Spot instance = %+v, %v; want Stopped, naming the interruption", got, err)
	}
}

// TestExitRangeDelegatedAndBootedWithIt: with spec.aws.ipv6ExitRange the
// launch asks for a delegated /80, Get reports the one EC2 delegated, and
// the instance's forward proxy (faultkit.BootForwardProxy, from the user-data) is
// started with it as its exit range, under the documented policy. The
// prefix is the proxy's configuration only: a cloud's prefix cannot be
// routed on the test machine (docs/ipv6.md's netns test routes a ULA one).
func TestExitRangeDelegatedAndBootedWithIt(t *testing.T) {
	var boots faultkit.Boots
	fake := ec2test.New(t, ec2test.WithPolicy(documentedPolicy(t)), ec2test.WithBoot(faultkit.BootForwardProxy(t, &boots)))
	p := newProvider(t, fake)
	ctx := context.Background()
	proxy := testProxy(1, func(a *crawlv1alpha1.AWSProvider) {
		a.IPv6ExitRange = true
		a.SubnetIDs = []string{"subnet-0a0a0a0a0a0a0a0a0"}
		a.SecurityGroupIDs = ec2test.DefaultSecurityGroups
	})
	inst, err := p.Create(ctx, request(proxy, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	var got provider.Instance
	for deadline := time.Now().Add(10 * time.Second); got.State != provider.StateRunning; {
		if got, err = p.Get(ctx, inst.ID); err != nil || time.Now().After(deadline) {
			t.Fatalf("Get = %+v, %v; want Running", got, err)
		}
	}
	live := fake.Live()
	if len(live) != 1 || len(live[0].Ipv6Prefixes) != 1 {
		t.Fatalf("live instances %+v, want one with one delegated prefix", live)
	}
	delegated := live[0].Ipv6Prefixes
	if diff := cmp.Diff(delegated, got.ExitRanges); diff != "" {
		t.Errorf("Instance.ExitRanges (-delegated +got):\n%s", diff)
	}
	booted, ok := boots.ExitRanges(live[0].ID)
	if diff := cmp.Diff(delegated, booted); !ok || diff != "" {
		t.Errorf("the booted forward proxy's exit ranges (booted %v) (-delegated +got):\n%s", ok, diff)
	}

	// Without the field: no prefix asked, none reported, none booted with.
	plain := testProxy(2, func(a *crawlv1alpha1.AWSProvider) { a.SecurityGroupIDs = ec2test.DefaultSecurityGroups })
	inst2, err := p.Create(ctx, request(plain, "hash-1"))
	if err != nil {
		t.Fatal(err)
	}
	if inst2.ExitRanges != nil {
		t.Errorf("plain instance ExitRanges = %v, want none", inst2.ExitRanges)
	}
	id2 := strings.TrimPrefix(inst2.ID, region+"/")
	if booted, ok := boots.ExitRanges(id2); !ok || len(booted) != 0 {
		t.Errorf("plain instance booted %v with exit ranges %v, want booted with none", ok, booted)
	}
}
