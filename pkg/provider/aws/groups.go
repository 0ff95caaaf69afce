package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// TagOwnedGroup marks a security group the operator created for
// spec.aws.allowFrom (with TagClusterID): Sweep deletes it once unused.
const TagOwnedGroup = "crawl.proxyfleet.io/owned-security-group"

// ownedGroupName is the name of the group that admits port from cidrs in
// vpc for clusterID: the same settings share one group, and other settings
// get another (a changed allowFrom replaces the instances onto a new group,
// and the old one is swept; docs/decisions/0193-aws-owned-security-group.md).
// It is pure.
func ownedGroupName(clusterID, vpc string, port int32, cidrs []crawlv1alpha1.CIDR) string {
	return "proxy-operator-" + cloudkit.AllowFromKey(port, cidrs, clusterID, vpc)
}

// ingress is the one rule of an owned group: TCP port from each range.
func ingress(port int32, cidrs []crawlv1alpha1.CIDR) types.IpPermission {
	perm := types.IpPermission{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(port), ToPort: awssdk.Int32(port)}
	for _, c := range cidrs {
		desc := awssdk.String("proxy-operator: spec.aws.allowFrom")
		if prefix, err := netip.ParsePrefix(string(c)); err == nil && prefix.Addr().Is6() {
			perm.Ipv6Ranges = append(perm.Ipv6Ranges, types.Ipv6Range{CidrIpv6: awssdk.String(string(c)), Description: desc})
		} else {
			perm.IpRanges = append(perm.IpRanges, types.IpRange{CidrIp: awssdk.String(string(c)), Description: desc})
		}
	}
	return perm
}

// ownedGroup returns the ID of the group spec.aws.allowFrom asks for in
// subnet's VPC, creating it and its rule when missing. Each step is
// idempotent, so a crash between them leaves nothing the next call does
// not finish.
func (p *Provider) ownedGroup(ctx context.Context, region string, proxy *crawlv1alpha1.Proxy, subnet string) (string, error) {
	c := p.client(region)
	vpc, err := p.vpcOf(ctx, c, subnet)
	if err != nil {
		return "", err
	}
	spec := awsSpec(proxy)
	name := ownedGroupName(p.clusterID, vpc, port(proxy), spec.AllowFrom)
	cacheKey := region + "/" + vpc + "/" + name
	p.mu.Lock()
	id, known := p.groups[cacheKey]
	p.mu.Unlock()
	if known {
		return id, nil
	}
	id, err = p.findGroup(ctx, c, vpc, name)
	if err == nil && id == "" {
		id, err = p.createGroup(ctx, c, vpc, name, port(proxy))
	}
	if err != nil {
		return "", err
	}
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{
		GroupId: awssdk.String(id), IpPermissions: []types.IpPermission{ingress(port(proxy), spec.AllowFrom)},
	})
	if err != nil && errorCode(err) != "InvalidPermission.Duplicate" {
		return "", fmt.Errorf("admitting port %d to security group %s: %w", port(proxy), id, err)
	}
	p.mu.Lock()
	p.groups[cacheKey] = id
	p.mu.Unlock()
	return id, nil
}

// vpcOf is the VPC of subnet, or the region's default VPC without one.
func (p *Provider) vpcOf(ctx context.Context, c *ec2.Client, subnet string) (string, error) {
	if subnet != "" {
		out, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnet}})
		if err != nil {
			return "", fmt.Errorf("finding the VPC of %s: %w", subnet, err)
		}
		if len(out.Subnets) != 1 || out.Subnets[0].VpcId == nil {
			return "", fmt.Errorf("finding the VPC of %s: EC2 returned %d subnets", subnet, len(out.Subnets))
		}
		return *out.Subnets[0].VpcId, nil
	}
	out, err := c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []types.Filter{{Name: awssdk.String("is-default"), Values: []string{"true"}}}})
	if err != nil {
		return "", fmt.Errorf("finding the default VPC: %w", err)
	}
	if len(out.Vpcs) == 0 || out.Vpcs[0].VpcId == nil {
		return "", errors.New("the region has no default VPC: set spec.aws.subnetIDs")
	}
	return *out.Vpcs[0].VpcId, nil
}

func (p *Provider) findGroup(ctx context.Context, c *ec2.Client, vpc, name string) (string, error) {
	out, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("group-name"), Values: []string{name}},
		{Name: awssdk.String("vpc-id"), Values: []string{vpc}},
	}})
	if err != nil {
		return "", fmt.Errorf("looking up security group %s: %w", name, err)
	}
	if len(out.SecurityGroups) == 0 {
		return "", nil
	}
	return awssdk.ToString(out.SecurityGroups[0].GroupId), nil
}

func (p *Provider) createGroup(ctx context.Context, c *ec2.Client, vpc, name string, port int32) (string, error) {
	out, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName:   awssdk.String(name),
		Description: awssdk.String("proxy-operator: the proxy port " + strconv.Itoa(int(port)) + " from spec.aws.allowFrom only"),
		VpcId:       awssdk.String(vpc),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSecurityGroup, Tags: ec2Tags(map[string]string{
			TagName: name, TagClusterID: p.clusterID, TagOwnedGroup: "true",
			crawlv1alpha1.TagManagedBy: crawlv1alpha1.ManagedByValue,
		})}},
	})
	if errorCode(err) == "InvalidGroup.Duplicate" { // another worker made it first
		return p.findGroup(ctx, c, vpc, name)
	}
	if err != nil {
		return "", fmt.Errorf("creating security group %s: %w", name, err)
	}
	return awssdk.ToString(out.GroupId), nil
}

// Sweep deletes the security groups this cluster owns that no instance
// uses any longer (the orphan GC calls it after each round). A group still
// attached to an instance EC2 has not finished terminating is left for a
// later round.
func (p *Provider) Sweep(ctx context.Context) (int, error) {
	deleted := 0
	var errs []error
	for _, region := range p.regions() {
		c := p.client(region)
		out, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
			{Name: awssdk.String("tag:" + TagClusterID), Values: []string{p.clusterID}},
			{Name: awssdk.String("tag:" + TagOwnedGroup), Values: []string{"true"}},
		}})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the owned security groups of region %s: %w", region, classify(err)))
			continue
		}
		for _, g := range out.SecurityGroups {
			id := awssdk.ToString(g.GroupId)
			used, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
				{Name: awssdk.String("instance.group-id"), Values: []string{id}},
				{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "shutting-down", "stopping", "stopped"}},
			}})
			if err != nil {
				errs = append(errs, fmt.Errorf("listing the instances of security group %s: %w", id, classify(err)))
				continue
			}
			if len(used.Reservations) > 0 {
				continue
			}
			_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: awssdk.String(id)})
			switch {
			case errorCode(err) == "DependencyViolation":
				continue // an instance still holds it: next round
			case err != nil:
				errs = append(errs, fmt.Errorf("deleting security group %s: %w", id, classify(err)))
				continue
			}
			deleted++
			p.forgetGroup(id)
			klog.FromContext(ctx).Info("Deleted unused security group", "region", region, "securityGroup", id, "name", awssdk.ToString(g.GroupName))
		}
	}
	return deleted, errors.Join(errs...)
}

func (p *Provider) forgetGroup(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.groups {
		if v == id {
			delete(p.groups, k)
		}
	}
}
