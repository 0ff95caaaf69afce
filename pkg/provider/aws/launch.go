package aws

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash/fnv"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Defaults for a spec.aws that the API server did not default; they match
// the CRD's.
const (
	DefaultInstanceType = "t3.micro"
	DefaultPort         = 3128
	// DefaultImageParameter is the SSM public parameter of Debian 12 on amd64.
	DefaultImageParameter = "/aws/service/debian/release/12/latest/amd64"
)

// The tags the provider writes besides provider.Tags.
const (
	// TagName is the console's name column: the instance name.
	TagName = "Name"
	// TagSpecHash records the spec hash the instance was built from.
	TagSpecHash = cloudkit.LabelSpecHash
	// TagClusterID scopes every instance to the operator's cluster, so that
	// two clusters sharing an account never collect each other's instances.
	TagClusterID = cloudkit.LabelClusterID
	// TagPort records spec.aws.port: Get reports it as the instance's port.
	TagPort = cloudkit.LabelPort
)

// EnvFile is where the operator's part of the user-data writes the proxy's
// settings (port, credentials, egress ranges) as shell variables, mode 0600,
// for the user's cloud-init to read (docs/aws.md).
const EnvFile = cloudkit.EnvFile

// MaxUserData is EC2's limit on user-data before base64.
const MaxUserData = 16 * 1024

// launchSpec is one RunInstances attempt's place: an instance type in a
// subnet ("" lets EC2 choose).
type launchSpec struct {
	instanceType string
	subnet       string
}

// launchOrder is every place a create may try, in order: each instance type
// in turn, and for each the subnets starting at the one the Proxy's UID
// picks, so that a fleet spreads over the subnets.
func launchOrder(spec crawlv1alpha1.AWSProvider, uid string) []launchSpec {
	instanceTypes := spec.InstanceTypes
	if len(instanceTypes) == 0 {
		instanceTypes = []string{DefaultInstanceType}
	}
	subnets := spec.SubnetIDs
	if len(subnets) == 0 {
		subnets = []string{""}
	}
	h := fnv.New32a()
	h.Write([]byte(uid))
	first := int(h.Sum32() % uint32(len(subnets)))
	var order []launchSpec
	for _, t := range instanceTypes {
		for i := range subnets {
			order = append(order, launchSpec{instanceType: t, subnet: subnets[(first+i)%len(subnets)]})
		}
	}
	return order
}

// clientToken makes RunInstances idempotent for one place and one attempt:
// a create retried after a crash sends the same token and gets the same
// instance back. attempt moves on when the token's instance is already
// terminated (a replacement built from the same spec needs a new one).
// EC2 allows 64 ASCII characters.
func clientToken(name, specHash string, at launchSpec, attempt int) string {
	sum := sha256.Sum256([]byte(specHash + "\x00" + at.instanceType + "\x00" + at.subnet))
	return name + "-" + hex.EncodeToString(sum[:6]) + "-" + strconv.Itoa(attempt)
}

// runInput is the RunInstances request of a create at one place. It is pure.
func runInput(req provider.CreateRequest, clusterID, userData string, at launchSpec, attempt int) *ec2.RunInstancesInput {
	spec := awsSpec(req.Proxy)
	in := &ec2.RunInstancesInput{
		MinCount:     awssdk.Int32(1),
		MaxCount:     awssdk.Int32(1),
		ClientToken:  awssdk.String(clientToken(req.Name, req.SpecHash, at, attempt)),
		ImageId:      awssdk.String(imageRef(spec.Image)),
		InstanceType: types.InstanceType(at.instanceType),
		UserData:     awssdk.String(userData),
		// IMDSv2 only, one hop: the proxy's host may read its metadata,
		// nothing it forwards for can.
		MetadataOptions: &types.InstanceMetadataOptionsRequest{
			HttpTokens:              types.HttpTokensStateRequired,
			HttpEndpoint:            types.InstanceMetadataEndpointStateEnabled,
			HttpPutResponseHopLimit: awssdk.Int32(1),
		},
		// Stopping from inside the instance ends it: instances are cattle.
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: ec2Tags(instanceTags(req, clusterID))},
			{ResourceType: types.ResourceTypeVolume, Tags: ec2Tags(instanceTags(req, clusterID))},
		},
		// No KeyName: no SSH key, so no SSH login at all.
	}
	// A public IPv4 address is the proxy's egress IP; it needs a network
	// interface spec, which then carries the subnet and security groups.
	nic := types.InstanceNetworkInterfaceSpecification{
		DeviceIndex:              awssdk.Int32(0),
		AssociatePublicIpAddress: awssdk.Bool(true),
		DeleteOnTermination:      awssdk.Bool(true),
		Groups:                   append([]string(nil), spec.SecurityGroupIDs...),
	}
	if at.subnet != "" {
		nic.SubnetId = awssdk.String(at.subnet)
	}
	if spec.IPv6ExitRange {
		// A /80 delegated to the interface is routed to it by the VPC: no
		// neighbour discovery. The address gives the host its IPv6
		// default route (router advertisements on a dual-stack interface).
		nic.Ipv6PrefixCount = awssdk.Int32(1)
		nic.Ipv6AddressCount = awssdk.Int32(1)
	}
	in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{nic}
	if spec.Spot != nil {
		spot := &types.SpotMarketOptions{
			SpotInstanceType:             types.SpotInstanceTypeOneTime,
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if spec.Spot.MaxPrice != "" {
			spot.MaxPrice = awssdk.String(spec.Spot.MaxPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: spot}
	}
	return in
}

// awsSpec is spec.aws, or the zero value.
func awsSpec(p *crawlv1alpha1.Proxy) crawlv1alpha1.AWSProvider {
	if p.Spec.AWS == nil {
		return crawlv1alpha1.AWSProvider{}
	}
	return *p.Spec.AWS
}

// imageRef is the ImageId of RunInstances: an AMI ID, or an SSM parameter
// EC2 resolves at launch ("resolve:ssm:NAME"), so no SSM client is needed.
func imageRef(img *crawlv1alpha1.AWSImage) string {
	switch {
	case img != nil && img.ID != "":
		return img.ID
	case img != nil && img.SSMParameter != "":
		return "resolve:ssm:" + img.SSMParameter
	}
	return "resolve:ssm:" + DefaultImageParameter
}

// port is spec.aws.port, or DefaultPort.
func port(p *crawlv1alpha1.Proxy) int32 {
	if p.Spec.AWS != nil && p.Spec.AWS.Port != 0 {
		return p.Spec.AWS.Port
	}
	return DefaultPort
}

// instanceTags are the tags of a create request's instance.
func instanceTags(req provider.CreateRequest, clusterID string) map[string]string {
	tags := map[string]string{TagName: req.Name, TagClusterID: clusterID, TagPort: strconv.Itoa(int(port(req.Proxy)))}
	for k, v := range req.Tags {
		tags[k] = v
	}
	if req.SpecHash != "" {
		tags[TagSpecHash] = req.SpecHash
	}
	if awsSpec(req.Proxy).IPv6ExitRange {
		tags[cloudkit.LabelExitRange] = cloudkit.ExitRangeIPv6
	}
	return tags
}

func ec2Tags(tags map[string]string) []types.Tag {
	out := make([]types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, types.Tag{Key: awssdk.String(k), Value: awssdk.String(tags[k])})
	}
	return out
}

// exitRangeBoot finds the instance's delegated prefix at boot in its
// metadata (IMDSv2, which the launch requires; hop limit 1 reaches the
// host): EC2 delegates the prefix at launch, so the operator cannot write
// it into the user-data. Prefix delegation routes it to the interface, so
// no NDP.
var exitRangeBoot = cloudkit.ExitRangeBoot{
	Discover: `t=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' http://169.254.169.254/latest/api/token) && ` +
		`m=$(curl -sf -H "X-aws-ec2-metadata-token: $t" http://169.254.169.254/latest/meta-data/mac) && ` +
		`curl -sf -H "X-aws-ec2-metadata-token: $t" "http://169.254.169.254/latest/meta-data/network/interfaces/macs/$m/ipv6-prefix"`,
}

// userData is the instance's user-data, base64 as RunInstances wants it:
// the kit's (cloudkit.UserData), whose boundary derives from the request,
// so a retried launch sends the same user-data (RunInstances refuses a
// client token with other parameters). Errors name the field, never the
// content.
func userData(req provider.CreateRequest, creds *proxyaccess.Credentials) (string, error) {
	var opts []cloudkit.UserDataOption
	if awsSpec(req.Proxy).IPv6ExitRange {
		opts = append(opts, cloudkit.WithExitRange(exitRangeBoot))
	}
	ud, err := cloudkit.UserData("aws", req, creds, port(req.Proxy), MaxUserData, opts...)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(ud), nil
}
