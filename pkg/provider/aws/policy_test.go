package aws_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// documentedPolicy is the IAM policy of docs/aws.md §1, the first json
// block, for the tests' cluster.
func documentedPolicy(t *testing.T) *ec2test.Policy {
	t.Helper()
	return documentedPolicyFor(t, clusterID)
}

// documentedPolicyFor is the documented policy template filled in for
// cluster, as its docs say to.
func documentedPolicyFor(t *testing.T, cluster string) *ec2test.Policy {
	t.Helper()
	page, err := os.ReadFile("../../../docs/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "## 1. The IAM policy")
	if !ok {
		t.Fatal("docs/aws.md has no section \"## 1. The IAM policy\"")
	}
	_, rest, ok = strings.Cut(rest, "```json\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/aws.md §1 has no json block")
	}
	if !strings.Contains(block, "CLUSTER_ID") {
		t.Fatal("docs/aws.md §1's policy does not name CLUSTER_ID: it would let one cluster's operator touch another's instances")
	}
	policy, err := ec2test.ParsePolicy([]byte(strings.ReplaceAll(block, "CLUSTER_ID", cluster)))
	if err != nil {
		t.Fatal(err)
	}
	return policy
}

// The provider's every call passes under the documented policy.
func TestDocumentedPolicyAllowsTheProvider(t *testing.T) {
	fake := ec2test.New(t, ec2test.WithPolicy(documentedPolicy(t)))
	p := newProvider(t, fake)
	ctx := context.Background()
	proxy := testProxy(40, func(a *crawlv1alpha1.AWSProvider) {
		a.SubnetIDs = []string{"subnet-0a0a0a0a0a0a0a0a0"}
		a.SecurityGroupIDs = ec2test.DefaultSecurityGroups
		a.Spot = &crawlv1alpha1.AWSSpot{}
	})
	inst, err := p.Create(ctx, request(proxy, "h"))
	if err != nil {
		t.Fatalf("Create under the documented policy: %v", err)
	}
	// The operator's own security group: created, tagged, opened, then
	// swept once its instance is gone.
	withGroup := testProxy(41, func(a *crawlv1alpha1.AWSProvider) { a.AllowFrom = []crawlv1alpha1.CIDR{"10.20.0.0/16"} })
	grouped, err := p.Create(ctx, request(withGroup, "h"))
	if err != nil {
		t.Fatalf("Create with allowFrom under the documented policy: %v", err)
	}
	if err := p.Delete(ctx, grouped.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := fake.SetState(grouped.ID[strings.LastIndex(grouped.ID, "/")+1:], "terminated", ""); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the one group deleted", n, err)
	}
	if _, err := p.Get(ctx, inst.ID); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// The documented policy refuses what the operator must never do, as AWS
// would evaluate it; the calls go through the SDK, not the provider.
func TestDocumentedPolicyRefusesTheRest(t *testing.T) {
	fake := ec2test.New(t, ec2test.WithPolicy(documentedPolicy(t)), ec2test.WithPrincipal(otherClusterKey, documentedPolicyFor(t, "cluster-b")))
	clientOf := func(keyID string) *ec2.Client {
		return ec2.New(ec2.Options{
			Region: region, BaseEndpoint: awssdk.String(fake.URL),
			Credentials: credentials.NewStaticCredentialsProvider(keyID, ec2test.SecretAccessKey, ""),
		})
	}
	client, otherCluster := clientOf(ec2test.AccessKeyID), clientOf(otherClusterKey)
	ctx := context.Background()
	ownedBy := func(cluster string) []types.TagSpecification {
		return []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{
			{Key: awssdk.String(crawlv1alpha1.TagManagedBy), Value: awssdk.String(crawlv1alpha1.ManagedByValue)},
			{Key: awssdk.String(aws.TagClusterID), Value: awssdk.String(cluster)},
		}}}
	}
	launch := func(c *ec2.Client, change func(*ec2.RunInstancesInput)) (*ec2.RunInstancesOutput, error) {
		in := &ec2.RunInstancesInput{
			MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ImageId: awssdk.String(ec2test.DefaultImages[0]), InstanceType: types.InstanceTypeT3Micro,
			MetadataOptions:   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
			TagSpecifications: ownedBy(clusterID),
		}
		change(in)
		return c.RunInstances(ctx, in)
	}
	run := func(change func(*ec2.RunInstancesInput)) error {
		_, err := launch(client, change)
		return err
	}
	if _, err := launch(client, func(*ec2.RunInstancesInput) {}); err != nil {
		t.Fatalf("the base launch of the cases below is refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"launch without the managed-by tag", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.TagSpecifications = nil })
		}},
		{"launch with IMDSv1 allowed", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.MetadataOptions.HttpTokens = types.HttpTokensStateOptional })
		}},
		{"launch from an SSM parameter outside /aws/service/", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.ImageId = awssdk.String("resolve:ssm:/team/golden-ami") })
		}},
		{"launch tagged for another cluster", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.TagSpecifications = ownedBy("cluster-b") })
		}},
		{"terminate another cluster's instance", func() error {
			out, err := launch(otherCluster, func(in *ec2.RunInstancesInput) { in.TagSpecifications = ownedBy("cluster-b") })
			if err != nil {
				return fmt.Errorf("the other cluster's own launch: %w", err)
			}
			_, err = client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{*out.Instances[0].InstanceId}})
			return err
		}},
		{"terminate an instance the operator does not own", func() error {
			// Launched with a tag set the policy allows, then its
			// ownership tag is taken away behind the operator's back.
			out, err := launch(client, func(*ec2.RunInstancesInput) {})
			if err != nil {
				return err
			}
			id := *out.Instances[0].InstanceId
			if err := fake.SetTag(id, crawlv1alpha1.TagManagedBy, "someone-else"); err != nil {
				return err
			}
			_, err = client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			return err
		}},
		{"create a security group without the managed-by tag", func() error {
			_, err := client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
				GroupName: awssdk.String("not-ours"), Description: awssdk.String("x"), VpcId: awssdk.String(defaultVPC(t, client)),
			})
			return err
		}},
		{"delete another cluster's security group", func() error {
			out, err := otherCluster.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
				GroupName: awssdk.String("cluster-b"), Description: awssdk.String("x"), VpcId: awssdk.String(defaultVPC(t, otherCluster)),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSecurityGroup, Tags: ownedBy("cluster-b")[0].Tags}},
			})
			if err != nil {
				return fmt.Errorf("the other cluster's own group: %w", err)
			}
			_, err = client.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: out.GroupId})
			return err
		}},
		{"delete a security group the operator does not own", func() error {
			out, err := client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
				GroupName: awssdk.String("was-ours"), Description: awssdk.String("x"), VpcId: awssdk.String(defaultVPC(t, client)),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSecurityGroup, Tags: ownedBy(clusterID)[0].Tags}},
			})
			if err != nil {
				return err
			}
			if err := fake.SetGroupTag(*out.GroupId, crawlv1alpha1.TagManagedBy, "someone-else"); err != nil {
				return err
			}
			_, err = client.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: out.GroupId})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "UnauthorizedOperation" {
				t.Errorf("got %v, want UnauthorizedOperation", err)
			}
		})
	}
}

// defaultVPC is the fake's default VPC, as EC2 names it.
func defaultVPC(t *testing.T, client *ec2.Client) string {
	t.Helper()
	out, err := client.DescribeVpcs(context.Background(), &ec2.DescribeVpcsInput{Filters: []types.Filter{{Name: awssdk.String("is-default"), Values: []string{"true"}}}})
	if err != nil || len(out.Vpcs) != 1 {
		t.Fatalf("DescribeVpcs: %v", err)
	}
	return *out.Vpcs[0].VpcId
}
