package azure

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v8"
	"golang.org/x/crypto/ssh"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults for a spec.azure that the API server did not default; they
// match the CRD's.
const (
	DefaultVMSize = "Standard_B1s"
	DefaultPort   = 3128
)

// DefaultImage is Debian 12 from the marketplace.
var DefaultImage = crawlv1alpha1.AzureImage{Publisher: "Debian", Offer: "debian-12", SKU: "12-gen2", Version: "latest"}

// MaxUserData is Azure's limit on a VM's custom data (64 KiB once base64
// encoded, so 48 KiB of user-data).
const MaxUserData = 48 * 1024

// Names of a VM's companions in the resource group.
func nicName(vm string) string { return vm + "-nic" }
func ipName(vm string) string  { return vm + "-ip" }

// validName is an instance name this provider made (cloudkit.InstanceName).
var validName = regexp.MustCompile(`^px-[0-9a-f]{1,16}-[0-9a-f]{8}$`)

// settings is a create's spec.azure with the defaults filled in.
type settings struct {
	location  string
	sizes     []string
	image     crawlv1alpha1.AzureImage
	subnetID  string
	allowFrom []string
	port      int32
}

// settingsOf is spec.azure of proxy with its defaults; location and subnet
// fall back to the operator's. It is pure. Errors name the field.
func settingsOf(proxy *crawlv1alpha1.Proxy, defaultLocation, defaultSubnet string) (settings, error) {
	spec := crawlv1alpha1.AzureProvider{}
	if proxy.Spec.Azure != nil {
		spec = *proxy.Spec.Azure
	}
	s := settings{location: cmpOrString(spec.Location, defaultLocation), sizes: spec.VMSizes, image: DefaultImage,
		subnetID: cmpOrString(spec.SubnetID, defaultSubnet), port: spec.Port}
	switch {
	case s.location == "":
		return settings{}, errors.New("no location: set spec.azure.location or the operator's --azure-location")
	case s.subnetID == "":
		return settings{}, errors.New("no subnet: set spec.azure.subnetID or the operator's --azure-subnet-id")
	}
	if spec.Image != nil {
		s.image = *spec.Image
		s.image.Version = cmpOrString(s.image.Version, "latest")
	}
	for i, c := range spec.AllowFrom {
		prefix, err := netip.ParsePrefix(string(c))
		if err != nil {
			return settings{}, fmt.Errorf("spec.azure.allowFrom[%d]: %q is no CIDR", i, c)
		}
		s.allowFrom = append(s.allowFrom, prefix.Masked().String())
	}
	slices.Sort(s.allowFrom)
	s.allowFrom = slices.Compact(s.allowFrom)
	if len(s.sizes) == 0 {
		s.sizes = []string{DefaultVMSize}
	}
	if s.port == 0 {
		s.port = DefaultPort
	}
	return s, nil
}

func cmpOrString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Azure tag names may not hold "/", so the kit's label
// crawl.proxyfleet.io/<name> is the tag pxo-<name>.
const (
	tagPrefix   = "pxo-"
	labelPrefix = "crawl.proxyfleet.io/"
)

// azureTags are labels as Azure tags.
func azureTags(labels map[string]string) map[string]*string {
	tags := make(map[string]*string, len(labels))
	for k, v := range labels {
		if name, ok := strings.CutPrefix(k, labelPrefix); ok {
			tags[tagPrefix+name] = to.Ptr(v)
		}
	}
	return tags
}

// labelsOf reads back the labels azureTags wrote; other tags are ignored.
func labelsOf(tags map[string]*string) map[string]string {
	labels := map[string]string{}
	for k, v := range tags {
		if name, ok := strings.CutPrefix(k, tagPrefix); ok && v != nil {
			labels[labelPrefix+name] = *v
		}
	}
	return labels
}

// nsgName is the name of the owned network security group of a port and
// ranges: every VM with the same ones shares it.
func nsgName(clusterID string, s settings) string {
	sum := sha256.Sum256([]byte(clusterID + "\x00" + strconv.Itoa(int(s.port)) + "\x00" + strings.Join(s.allowFrom, ",")))
	return "pxo-nsg-" + hex.EncodeToString(sum[:6])
}

// securityGroup admits the proxy port from s.allowFrom and nothing else
// from the internet (Azure's default rules deny the rest inbound).
func securityGroup(location string, tags map[string]*string, s settings) armnetwork.SecurityGroup {
	return armnetwork.SecurityGroup{
		Location: to.Ptr(location), Tags: tags,
		Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: []*armnetwork.SecurityRule{{
			Name: to.Ptr("allow-proxy-port"),
			Properties: &armnetwork.SecurityRulePropertiesFormat{
				Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
				Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP), Priority: to.Ptr[int32](100),
				SourceAddressPrefixes: to.SliceOfPtrs(s.allowFrom...), SourcePortRange: to.Ptr("*"),
				DestinationAddressPrefix: to.Ptr("*"), DestinationPortRange: to.Ptr(strconv.Itoa(int(s.port))),
			},
		}}},
	}
}

// publicIP is a static Standard IPv4 address.
func publicIP(location string, tags map[string]*string) armnetwork.PublicIPAddress {
	return armnetwork.PublicIPAddress{
		Location: to.Ptr(location), Tags: tags,
		SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{
			PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic),
			PublicIPAddressVersion:   to.Ptr(armnetwork.IPVersionIPv4),
		},
	}
}

// networkInterface joins s.subnetID with the public IP ipID, guarded by
// nsgID when not empty.
func networkInterface(location string, tags map[string]*string, s settings, ipID, nsgID string) armnetwork.Interface {
	nic := armnetwork.Interface{
		Location: to.Ptr(location), Tags: tags,
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipv4"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
				Primary: to.Ptr(true), PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
				Subnet:          &armnetwork.Subnet{ID: to.Ptr(s.subnetID)},
				PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(ipID)},
			},
		}}},
	}
	if nsgID != "" {
		nic.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: to.Ptr(nsgID)}
	}
	return nic
}

// virtualMachine is the VM of size with the NIC nicID. The custom data is
// the kit's user-data. No password, and an SSH key whose private half
// nobody has (noLoginSSHKey): cloud-init configures the VM, nobody logs in. Its OS disk
// goes with it.
func virtualMachine(name, location string, tags map[string]*string, s settings, size, nicID string, userData []byte) (armcompute.VirtualMachine, error) {
	sshKey, err := noLoginSSHKey(name)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	return armcompute.VirtualMachine{
		Location: to.Ptr(location), Tags: tags,
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes(size))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: &armcompute.ImageReference{Publisher: to.Ptr(s.image.Publisher), Offer: to.Ptr(s.image.Offer), SKU: to.Ptr(s.image.SKU), Version: to.Ptr(s.image.Version)},
				OSDisk: &armcompute.OSDisk{
					CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage), DeleteOption: to.Ptr(armcompute.DiskDeleteOptionTypesDelete),
					ManagedDisk: &armcompute.ManagedDiskParameters{StorageAccountType: to.Ptr(armcompute.StorageAccountTypesStandardLRS)},
				},
			},
			OSProfile: &armcompute.OSProfile{
				ComputerName: to.Ptr(name), AdminUsername: to.Ptr("proxyop"), CustomData: to.Ptr(base64.StdEncoding.EncodeToString(userData)),
				LinuxConfiguration: &armcompute.LinuxConfiguration{
					DisablePasswordAuthentication: to.Ptr(true),
					SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{
						Path: to.Ptr("/home/proxyop/.ssh/authorized_keys"), KeyData: to.Ptr(sshKey),
					}}},
				},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID: to.Ptr(nicID), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)},
			}}},
		},
	}, nil
}

// noLoginSSHKey is an Ed25519 public key nobody holds the private half
// of: the SHA-256 of the VM's name under a fixed prefix, taken as the
// key's 32 bytes. Azure needs a key or a password for a Linux VM, and
// refuses to change either on a live VM (PropertyChangeNotAllowed), so a
// create retried after a lost answer must send the same key: hence derived
// from the name, not drawn. If the bytes encode a curve point, finding its
// private key is the discrete logarithm problem; if not, no signature
// verifies. Either way nobody logs in, as with a key thrown away.
func noLoginSSHKey(name string) (string, error) {
	sum := sha256.Sum256([]byte("proxy-operator azure no-login ssh key v1\x00" + name))
	key, err := ssh.NewPublicKey(ed25519.PublicKey(sum[:]))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), nil
}

// toInstance is the provider's view of a VM and its public IP (nil when
// it has none yet). It is pure.
func toInstance(vm *armcompute.VirtualMachine, ip *armnetwork.PublicIPAddress) provider.Instance {
	labels := labelsOf(vm.Tags)
	inst := provider.Instance{ID: deref(vm.Name), Tags: cloudkit.ProxyTags(labels), SpecHash: labels[cloudkit.LabelSpecHash]}
	state := ""
	if props := vm.Properties; props != nil {
		state = deref(props.ProvisioningState)
		if props.TimeCreated != nil {
			inst.CreatedAt = *props.TimeCreated
		}
	}
	address := ""
	if ip != nil && ip.Properties != nil {
		address = deref(ip.Properties.IPAddress)
	}
	switch state {
	case "Succeeded":
		if address != "" {
			inst.State, inst.IP, inst.Port = provider.StateRunning, address, cloudkit.PortOf(labels, DefaultPort)
			return inst
		}
		inst.State, inst.Message = provider.StateProvisioning, "succeeded, waiting for its public IPv4 address"
	case "Failed", "Deleting", "Canceled":
		inst.State, inst.Message = provider.StateStopped, "provisioning state "+state
	default: // Creating, Updating, Migrating, or not reported yet
		inst.State, inst.Message = provider.StateProvisioning, cmpOrString(state, "Creating")
	}
	return inst
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
