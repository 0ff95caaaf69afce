package aws

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
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
	TagSpecHash = "crawl.proxyfleet.io/spec-hash"
	// TagClusterID scopes every instance to the operator's cluster, so that
	// two clusters sharing an account never collect each other's instances.
	TagClusterID = "crawl.proxyfleet.io/cluster-id"
	// TagPort records spec.aws.port: Get reports it as the instance's port.
	TagPort = "crawl.proxyfleet.io/proxy-port"
)

// EnvFile is where the operator's part of the user-data writes the proxy's
// settings (port, credentials, egress ranges) as shell variables, mode 0600,
// for the user's cloud-init to read (docs/aws.md).
const EnvFile = "/etc/proxy-operator/proxy.env"

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
	return tags
}

func ec2Tags(tags map[string]string) []types.Tag {
	out := make([]types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, types.Tag{Key: awssdk.String(k), Value: awssdk.String(tags[k])})
	}
	return out
}

// userData is the instance's user-data, base64 as RunInstances wants it: a
// MIME multipart of the user's cloud-init (if any) and the operator's
// cloud-config part, which writes EnvFile and merges into the user's by
// appending, so a write_files of theirs is kept. Errors name the field,
// never the content.
func userData(req provider.CreateRequest, creds *proxyaccess.Credentials) (string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	// A boundary of the request's own, so a retried launch sends the same
	// user-data: RunInstances refuses a client token with other parameters.
	sum := sha256.Sum256([]byte(req.Name + "\x00" + req.SpecHash))
	if err := w.SetBoundary("proxy-operator-" + hex.EncodeToString(sum[:12])); err != nil {
		return "", err
	}
	fmt.Fprintf(&buf, "Content-Type: multipart/mixed; boundary=%q\r\nMIME-Version: 1.0\r\n\r\n", w.Boundary())
	if len(req.CloudInit) > 0 {
		contentType, err := cloudInitType(req.CloudInit)
		if err != nil {
			return "", err
		}
		if err := writePart(w, contentType, "user.cfg", req.CloudInit); err != nil {
			return "", err
		}
	}
	if err := writePart(w, "text/cloud-config", "proxy-operator.cfg", operatorCloudConfig(req, creds)); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	if buf.Len() > MaxUserData {
		return "", fmt.Errorf("the user-data would be %d bytes, over EC2's %d: shorten spec.cloudInit", buf.Len(), MaxUserData)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// cloudInitType is the MIME type of a cloud-init document, from its first line.
func cloudInitType(doc []byte) (string, error) {
	first, _, _ := strings.Cut(string(doc), "\n")
	first = strings.TrimSpace(first)
	switch {
	case first == "#cloud-config":
		return "text/cloud-config", nil
	case strings.HasPrefix(first, "#!"):
		return "text/x-shellscript", nil
	case first == "#cloud-boothook":
		return "text/cloud-boothook", nil
	}
	return "", errors.New("spec.cloudInit must start with #cloud-config, #cloud-boothook or #! on aws: the operator adds a part of its own to the user-data (docs/aws.md)")
}

func writePart(w *multipart.Writer, contentType, filename string, body []byte) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", contentType+`; charset="utf-8"`)
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	part, err := w.CreatePart(h)
	if err != nil {
		return err
	}
	_, err = part.Write(body)
	return err
}

// operatorCloudConfig is the operator's cloud-config part, as JSON (which
// cloud-init's YAML loader reads): EnvFile with the proxy's settings.
func operatorCloudConfig(req provider.CreateRequest, creds *proxyaccess.Credentials) []byte {
	var env strings.Builder
	fmt.Fprintf(&env, "PROXY_PORT=%d\n", port(req.Proxy))
	if creds != nil {
		fmt.Fprintf(&env, "PROXY_AUTH_USERNAME=%s\nPROXY_AUTH_PASSWORD=%s\n", shellQuote(creds.Username), shellQuote(creds.Password))
	}
	if e := req.Proxy.Spec.Egress; e != nil {
		fmt.Fprintf(&env, "PROXY_EGRESS_ALLOW_CIDRS=%s\n", shellQuote(joinCIDRs(e.AllowCIDRs)))
		fmt.Fprintf(&env, "PROXY_EGRESS_DENY_CIDRS=%s\n", shellQuote(joinCIDRs(e.DenyCIDRs)))
	}
	doc := map[string]any{
		"merge_how": []map[string]any{
			{"name": "list", "settings": []string{"append"}},
			{"name": "dict", "settings": []string{"no_replace", "recurse_list"}},
		},
		"write_files": []map[string]string{{
			"path": EnvFile, "permissions": "0600", "owner": "root:root", "content": env.String(),
		}},
	}
	body, _ := json.Marshal(doc) // maps of strings always marshal
	return append([]byte("#cloud-config\n"), body...)
}

func joinCIDRs(cidrs []crawlv1alpha1.CIDR) string {
	parts := make([]string, len(cidrs))
	for i, c := range cidrs {
		parts[i] = string(c)
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell's "." of EnvFile.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
