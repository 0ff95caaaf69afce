package aws_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// documentedPolicy is the IAM policy of docs/aws.md §1, the first json block.
func documentedPolicy(t *testing.T) *ec2test.Policy {
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
	policy, err := ec2test.ParsePolicy([]byte(block))
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
	fake := ec2test.New(t, ec2test.WithPolicy(documentedPolicy(t)))
	client := ec2.New(ec2.Options{
		Region: region, BaseEndpoint: awssdk.String(fake.URL),
		Credentials: credentials.NewStaticCredentialsProvider(ec2test.AccessKeyID, ec2test.SecretAccessKey, ""),
	})
	ctx := context.Background()
	owned := []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: awssdk.String(crawlv1alpha1.TagManagedBy), Value: awssdk.String(crawlv1alpha1.ManagedByValue)}}}}
	run := func(change func(*ec2.RunInstancesInput)) error {
		in := &ec2.RunInstancesInput{
			MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ImageId: awssdk.String(ec2test.DefaultImages[0]), InstanceType: types.InstanceTypeT3Micro,
			MetadataOptions:   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
			TagSpecifications: owned,
		}
		change(in)
		_, err := client.RunInstances(ctx, in)
		return err
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
		{"terminate an instance the operator does not own", func() error {
			// Launched with a tag set the policy allows, then its
			// ownership tag is taken away behind the operator's back.
			out, err := client.RunInstances(ctx, &ec2.RunInstancesInput{
				MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ImageId: awssdk.String(ec2test.DefaultImages[0]), InstanceType: types.InstanceTypeT3Micro,
				MetadataOptions:   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: awssdk.String(crawlv1alpha1.TagManagedBy), Value: awssdk.String(crawlv1alpha1.ManagedByValue)}}}},
			})
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
		{"delete a security group the operator does not own", func() error {
			out, err := client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
				GroupName: awssdk.String("was-ours"), Description: awssdk.String("x"), VpcId: awssdk.String(defaultVPC(t, client)),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSecurityGroup, Tags: []types.Tag{{Key: awssdk.String(crawlv1alpha1.TagManagedBy), Value: awssdk.String(crawlv1alpha1.ManagedByValue)}}}},
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
