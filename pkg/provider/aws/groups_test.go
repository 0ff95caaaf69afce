package aws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// TestOwnedSecurityGroup: spec.aws.allowFrom gives instances a group the
// operator creates once per setting (surviving a lost answer and a
// restart), admitting the proxy port from those ranges only, and sweeps
// once unused; another cluster's group is never touched.
func TestOwnedSecurityGroup(t *testing.T) {
	fake := ec2test.New(t, ec2test.WithPolicy(documentedPolicy(t)), ec2test.WithPrincipal(otherClusterKey, documentedPolicyFor(t, "cluster-b")))
	ctx := context.Background()
	allowFrom := func(cidrs ...crawlv1alpha1.CIDR) func(*crawlv1alpha1.AWSProvider) {
		return func(a *crawlv1alpha1.AWSProvider) {
			a.SubnetIDs, a.AllowFrom = []string{"subnet-0a0a0a0a0a0a0a0a0"}, cidrs
		}
	}
	instanceID := func(id string) string { return id[strings.LastIndex(id, "/")+1:] }

	// The create's answer is lost: the SDK's retry finds the name taken
	// and the provider adopts the group it made.
	fake.LoseNextAnswers(ec2test.CreateSecurityGroup, 1)
	p := newProvider(t, fake)
	first, err := p.Create(ctx, request(testProxy(60, allowFrom("10.20.0.0/16", "2001:db8::/32")), "h"))
	if err != nil {
		t.Fatal(err)
	}
	groups := fake.SecurityGroups()
	if len(groups) != 1 {
		t.Fatalf("%d security groups, want 1: %+v", len(groups), groups)
	}
	g := groups[0]
	if diff := cmp.Diff([]string{"tcp/3128/10.20.0.0/16", "tcp/3128/2001:db8::/32"}, g.Ingress); diff != "" {
		t.Errorf("ingress (-want +got):\n%s", diff)
	}
	if g.Tags[aws.TagClusterID] != clusterID || g.Tags[aws.TagOwnedGroup] != "true" || g.Tags[crawlv1alpha1.TagManagedBy] != crawlv1alpha1.ManagedByValue {
		t.Errorf("group tags %v", g.Tags)
	}
	if got := fake.Instances()[0].SecurityGroups; !cmp.Equal(got, []string{g.ID}) {
		t.Errorf("the instance has groups %v, want only %s", got, g.ID)
	}

	// A restarted operator (no cache) with the same setting, the ranges in
	// another order, reuses the group; another setting gets its own.
	p = newProvider(t, fake)
	second, err := p.Create(ctx, request(testProxy(61, allowFrom("2001:db8::/32", "10.20.0.0/16")), "h"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, request(testProxy(62, allowFrom("192.0.2.0/24")), "h")); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.SecurityGroups()); n != 2 {
		t.Errorf("%d security groups, want 2 (one per setting)", n)
	}
	other := newProvider(t, fake, asOtherCluster)
	if _, err := other.Create(ctx, request(testProxy(63, allowFrom("10.20.0.0/16")), "h")); err != nil {
		t.Fatal(err)
	}

	// Sweeping: nothing while instances use the groups; the first group
	// once both its instances are terminated; never cluster-b's.
	if n, err := p.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep with every group in use = %d, %v; want 0", n, err)
	}
	for _, id := range []string{first.ID, second.ID} {
		if err := fake.SetState(instanceID(id), "terminated", ""); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := p.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the unused group deleted", n, err)
	}
	var left []string
	for _, g := range fake.SecurityGroups() {
		left = append(left, g.Tags[aws.TagClusterID])
	}
	if !cmp.Equal(left, []string{clusterID, "cluster-b"}) {
		t.Errorf("groups left by cluster %v, want the in-use one of %s and cluster-b's", left, clusterID)
	}
	if fake.Calls(ec2test.CreateSecurityGroup) != 4 {
		t.Errorf("%d CreateSecurityGroup calls, want 4 (one retried after its lost answer, one per other setting and cluster)", fake.Calls(ec2test.CreateSecurityGroup))
	}
}
