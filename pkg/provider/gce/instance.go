package gce

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Defaults for a spec.gce that the API server did not default (a Proxy built
// in Go, or no spec.gce at all); they match the CRD's defaults.
const (
	DefaultMachineType = "e2-micro"
	DefaultSourceImage = "projects/debian-cloud/global/images/family/debian-12"
	DefaultPort        = 3128
	// DefaultNetwork is the project's default VPC network.
	DefaultNetwork = "global/networks/default"
)

// The metadata items the provider writes on every VM.
const (
	// MetadataUserData is the cloud-init user-data, read by cloud-init's GCE
	// datasource at boot. Secret: never logged.
	MetadataUserData = "user-data"
	// MetadataPort is the proxy port (spec.gce.port). cloud-init scripts may
	// read it from the metadata server; Get reports it as the instance's port.
	MetadataPort = "proxy-port"
	// MetadataTags holds the exact tags as JSON: labels are a lossy mapping.
	MetadataTags = "proxy-operator-tags"
	// MetadataSpecHash records the spec hash the VM was built from
	// (Instance.SpecHash).
	MetadataSpecHash = "proxy-operator-spec-hash"
	// MetadataEgressAllow and MetadataEgressDeny hold spec.egress's ranges,
	// space-separated (the shape of a squid "acl ... dst" line; a shell loop
	// makes forward-proxy's --allow-cidr flags of them). Written only when
	// set: the VM runs whatever cloud-init installs, so it is the
	// cloud-init's job to apply them (docs/gce.md).
	MetadataEgressAllow = "proxy-egress-allow-cidrs"
	MetadataEgressDeny  = "proxy-egress-deny-cidrs"
	// MetadataAuthUsername and MetadataAuthPassword are the credentials the
	// proxy must require: spec.auth's Secret, or the one the operator
	// generates for a Proxy without it. The cloud-init reads them at boot
	// (docs/gce.md), so no password need be written into the user-data, and
	// the health engine never lets a VM that ignores them be Ready
	// (docs/decisions/0140-managed-instance-must-refuse-request-without.md). Secret: never logged.
	MetadataAuthUsername = "proxy-auth-username"
	MetadataAuthPassword = "proxy-auth-password"
	// MetadataLeaseKeys is the instance's lease keys (the credentials
	// Secret's lease-key, when it holds one): a cloud-init that starts our
	// forward-proxy with them ($PROXY_LEASE_KEYS) makes its leases keys
	// (docs/decisions/0400-a-lease-is-a-key.md). Secret: never logged.
	MetadataLeaseKeys = "proxy-lease-keys"
	// MetadataExitRange marks a VM created with spec.gce.ipv6ExitRange
	// (cloudkit.ExitRangeIPv6): Get reports its /96 as its exit range.
	MetadataExitRange = "proxy-exit-range"
	// MetadataExitRangeScript is the boot script that sets the /96 up as
	// the exit range (the kit's: the local route and the exit-ranges
	// file); the VM's cloud-init runs it from a bootcmd (docs/gce.md), as
	// it applies the egress ranges, since the user-data is the user's own.
	MetadataExitRangeScript = "proxy-exit-range-script"
)

// exitRangeBoot finds the VM's external /96 at boot: the metadata server's
// ipv6s is its first address, whose last 32 bits are zero. Compute
// Engine's network routes the /96 to the VM: no NDP.
var exitRangeBoot = cloudkit.ExitRangeBoot{
	Discover: `curl -sf -H 'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/instance/network-interfaces/0/ipv6s | sed -n 's,^\([0-9a-f:]*\)$,\1/96,p'`,
}

// Spot VMs are deleted, not stopped, when Compute Engine preempts them: the
// controller would delete a stopped VM anyway (instances are cattle), and a
// VM that deletes itself leaves no boot disk billed in the meantime and
// nothing behind for GC while the operator is down.
const spotTerminationAction = "DELETE"

// accessConfigName names the external-IP access config, as the console does.
const accessConfigName = "External NAT"

// ipv6AccessConfigName names the external IPv6 access config, as the
// console does.
const ipv6AccessConfigName = "external-ipv6"

// location is the project and zone a Proxy's VM lives in: spec.gce, or the
// operator's defaults.
func location(p *crawlv1alpha1.Proxy, defaultProject, defaultZone string) (project, zone string, err error) {
	project, zone = defaultProject, defaultZone
	if spec := p.Spec.GCE; spec != nil {
		if spec.Project != "" {
			project = spec.Project
		}
		if spec.Zone != "" {
			zone = spec.Zone
		}
	}
	switch {
	case project == "":
		return "", "", errors.New("no project: set spec.gce.project or the operator's --gce-project")
	case zone == "":
		return "", "", errors.New("no zone: set spec.gce.zone or the operator's --gce-zone")
	}
	return project, zone, nil
}

// buildInstance is the VM a create request asks for, in zone, with creds
// (nil for none) in its metadata. It is pure.
func buildInstance(req provider.CreateRequest, zone string, creds *proxyaccess.Credentials) *compute.Instance {
	spec := crawlv1alpha1.GCEProvider{}
	if req.Proxy.Spec.GCE != nil {
		spec = *req.Proxy.Spec.GCE
	}
	machineType := orDefault(spec.MachineType, DefaultMachineType)
	image := orDefault(spec.SourceImage, DefaultSourceImage)

	tagsJSON, _ := json.Marshal(req.Tags) // a map[string]string always marshals
	metadata := []*compute.MetadataItems{
		{Key: MetadataPort, Value: ptrTo(strconv.Itoa(int(port(req.Proxy))))},
		{Key: MetadataTags, Value: ptrTo(string(tagsJSON))},
	}
	if req.SpecHash != "" {
		metadata = append(metadata, &compute.MetadataItems{Key: MetadataSpecHash, Value: ptrTo(req.SpecHash)})
	}
	if e := req.Proxy.Spec.Egress; e != nil {
		for _, l := range []struct {
			key    string
			ranges []crawlv1alpha1.CIDR
		}{{MetadataEgressAllow, e.AllowCIDRs}, {MetadataEgressDeny, e.DenyCIDRs}} {
			if len(l.ranges) == 0 {
				continue
			}
			parts := make([]string, len(l.ranges))
			for i, c := range l.ranges {
				parts[i] = string(c)
			}
			metadata = append(metadata, &compute.MetadataItems{Key: l.key, Value: ptrTo(strings.Join(parts, " "))})
		}
	}
	if req.CloudInit != nil {
		metadata = append(metadata, &compute.MetadataItems{Key: MetadataUserData, Value: ptrTo(string(req.CloudInit))})
	}
	if creds != nil {
		metadata = append(metadata,
			&compute.MetadataItems{Key: MetadataAuthUsername, Value: ptrTo(creds.Username)},
			&compute.MetadataItems{Key: MetadataAuthPassword, Value: ptrTo(creds.Password)})
		if creds.LeaseKeys != "" {
			metadata = append(metadata, &compute.MetadataItems{Key: MetadataLeaseKeys, Value: ptrTo(creds.LeaseKeys)})
		}
	}

	nic := &compute.NetworkInterface{
		Network:    networkURL(spec.Network, spec.Subnetwork),
		Subnetwork: subnetworkURL(spec.Subnetwork, zone),
		// An ephemeral external IPv4 address: the proxy's egress IP.
		AccessConfigs: []*compute.AccessConfig{{Name: accessConfigName, Type: "ONE_TO_ONE_NAT"}},
	}
	if spec.IPv6ExitRange {
		nic.StackType = "IPV4_IPV6"
		nic.Ipv6AccessConfigs = []*compute.AccessConfig{{Name: ipv6AccessConfigName, Type: "DIRECT_IPV6"}}
		metadata = append(metadata,
			&compute.MetadataItems{Key: MetadataExitRange, Value: ptrTo(cloudkit.ExitRangeIPv6)},
			&compute.MetadataItems{Key: MetadataExitRangeScript, Value: ptrTo(cloudkit.ExitRangeScript(exitRangeBoot))})
	}

	inst := &compute.Instance{
		Name:        req.Name,
		Description: fmt.Sprintf("proxy-operator instance of Proxy %s/%s", req.Proxy.Namespace, req.Proxy.Name),
		MachineType: machineTypeURL(machineType, zone),
		Labels:      labelsFromTags(req.Tags),
		Metadata:    &compute.Metadata{Items: metadata},
		Disks: []*compute.AttachedDisk{{
			Boot:             true,
			AutoDelete:       true,
			Type:             "PERSISTENT",
			InitializeParams: &compute.AttachedDiskInitializeParams{SourceImage: image},
		}},
		NetworkInterfaces: []*compute.NetworkInterface{nic},
		// No service account: the proxy needs no Google API, and attaching
		// one would need iam.serviceAccounts.actAs.
	}
	if len(spec.NetworkTags) > 0 {
		inst.Tags = &compute.Tags{Items: append([]string(nil), spec.NetworkTags...)}
	}
	if spec.Spot {
		inst.Scheduling = &compute.Scheduling{
			ProvisioningModel:         "SPOT",
			InstanceTerminationAction: spotTerminationAction,
			// Spot VMs cannot restart or live-migrate.
			AutomaticRestart:  ptrTo(false),
			OnHostMaintenance: "TERMINATE",
		}
	}
	return inst
}

// port is spec.gce.port, or DefaultPort.
func port(p *crawlv1alpha1.Proxy) int32 {
	if p.Spec.GCE != nil && p.Spec.GCE.Port != 0 {
		return p.Spec.GCE.Port
	}
	return DefaultPort
}

// machineTypeURL accepts a bare machine type ("e2-micro") or a URL/path.
func machineTypeURL(machineType, zone string) string {
	if strings.Contains(machineType, "/") {
		return machineType
	}
	return "zones/" + zone + "/machineTypes/" + machineType
}

// networkURL accepts a bare network name or a URL/path; with neither network
// nor subnetwork it is the default network, with only a subnetwork Compute
// Engine infers the network.
func networkURL(network, subnetwork string) string {
	switch {
	case network == "" && subnetwork == "":
		return DefaultNetwork
	case network == "" || strings.Contains(network, "/"):
		return network
	}
	return "global/networks/" + network
}

// subnetworkURL accepts a bare subnetwork name (in the zone's region) or a URL/path.
func subnetworkURL(subnetwork, zone string) string {
	if subnetwork == "" || strings.Contains(subnetwork, "/") {
		return subnetwork
	}
	return "regions/" + region(zone) + "/subnetworks/" + subnetwork
}

// region is the region of a zone: europe-west1-b → europe-west1.
func region(zone string) string {
	if i := strings.LastIndex(zone, "-"); i > 0 {
		return zone[:i]
	}
	return zone
}

// instanceID is the provider ID of a VM: "project/zone/name".
func instanceID(project, zone, name string) string { return project + "/" + zone + "/" + name }

// parseID splits an instanceID.
func parseID(id string) (project, zone, name string, ok bool) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// lastSegment is the name at the end of a resource URL ("…/zones/x" → "x").
func lastSegment(url string) string { return url[strings.LastIndex(url, "/")+1:] }

// stateOf maps a VM status to an instance state. Unknown statuses count as
// provisioning: the controller keeps polling rather than deleting a VM it
// does not understand.
func stateOf(status string) provider.State {
	switch status {
	case "RUNNING":
		return provider.StateRunning
	case "STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED":
		return provider.StateStopped
	default: // PROVISIONING, STAGING, REPAIRING, and anything new
		return provider.StateProvisioning
	}
}

// toInstance is the provider's view of a VM. It is pure.
func toInstance(project, zone string, vm *compute.Instance) provider.Instance {
	if vm.Zone != "" {
		zone = lastSegment(vm.Zone)
	}
	inst := provider.Instance{
		ID:      instanceID(project, zone, vm.Name),
		State:   stateOf(vm.Status),
		Tags:    instanceTags(vm),
		Message: strings.ToLower(vm.Status),
	}
	inst.SpecHash, _ = metadataValue(vm, MetadataSpecHash)
	marked, _ := metadataValue(vm, MetadataExitRange)
	inst.ExitRanges = cloudkit.ExitRanges(map[string]string{cloudkit.LabelExitRange: marked}, externalIPv6Ranges(vm))
	// The orphan collector judges duplicates by age (provider.Instance);
	// an unparsable timestamp leaves it zero: never judged.
	inst.CreatedAt, _ = time.Parse(time.RFC3339, vm.CreationTimestamp)
	if vm.StatusMessage != "" {
		inst.Message += ": " + vm.StatusMessage
	}
	if inst.State != provider.StateRunning {
		return inst
	}
	inst.IP = externalIP(vm)
	inst.Port = recordedPort(vm)
	if inst.IP == "" {
		// Nothing can reach it yet (or someone removed its access config):
		// keep polling rather than publish an empty address.
		inst.State, inst.Port = provider.StateProvisioning, 0
		inst.Message = "running without an external IP"
	}
	return inst
}

// externalIP is the natIP of the VM's first ONE_TO_ONE_NAT access config.
func externalIP(vm *compute.Instance) string {
	for _, nic := range vm.NetworkInterfaces {
		for _, ac := range nic.AccessConfigs {
			if ac.NatIP != "" {
				return ac.NatIP
			}
		}
	}
	return ""
}

// externalIPv6Ranges are the VM's external IPv6 ranges (a DIRECT_IPV6
// config's first address and prefix length) as CIDRs.
func externalIPv6Ranges(vm *compute.Instance) []string {
	var out []string
	for _, nic := range vm.NetworkInterfaces {
		for _, ac := range nic.Ipv6AccessConfigs {
			if ac.ExternalIpv6 != "" && ac.ExternalIpv6PrefixLength > 0 {
				out = append(out, ac.ExternalIpv6+"/"+strconv.FormatInt(ac.ExternalIpv6PrefixLength, 10))
			}
		}
	}
	return out
}

// recordedPort is the port recorded at create (MetadataPort), or DefaultPort.
func recordedPort(vm *compute.Instance) int32 {
	if v, ok := metadataValue(vm, MetadataPort); ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n > 0 && n < 65536 {
			return int32(n)
		}
	}
	return DefaultPort
}

// instanceTags are the exact tags from MetadataTags, or else the VM's
// labels mapped back (a VM labelled by hand or by an older version).
func instanceTags(vm *compute.Instance) map[string]string {
	if v, ok := metadataValue(vm, MetadataTags); ok {
		var tags map[string]string
		if json.Unmarshal([]byte(v), &tags) == nil && tags != nil {
			return tags
		}
	}
	return tagsFromLabels(vm.Labels)
}

func metadataValue(vm *compute.Instance, key string) (string, bool) {
	if vm.Metadata == nil {
		return "", false
	}
	for _, item := range vm.Metadata.Items {
		if item != nil && item.Key == key && item.Value != nil {
			return *item.Value, true
		}
	}
	return "", false
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func ptrTo[T any](v T) *T { return &v }
