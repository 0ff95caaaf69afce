package aws

import (
	"maps"
	"slices"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// instanceID is a provider instance ID: the region and the EC2 instance ID.
func instanceID(region, ec2ID string) string { return region + "/" + ec2ID }

// toInstance is the provider's view of an EC2 instance; found is false for a
// terminated one, which is gone as far as the controller is concerned (EC2
// keeps listing it for about an hour). It is pure.
func toInstance(region string, in types.Instance) (inst provider.Instance, found bool) {
	tags := map[string]string{}
	for _, t := range in.Tags {
		tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	inst = provider.Instance{
		ID:         instanceID(region, awssdk.ToString(in.InstanceId)),
		Tags:       tags,
		SpecHash:   tags[TagSpecHash],
		CreatedAt:  awssdk.ToTime(in.LaunchTime),
		ExitRanges: cloudkit.ExitRanges(tags, delegatedPrefixes(in)),
	}
	delete(inst.Tags, cloudkit.LabelExitRange)
	delete(inst.Tags, TagName)
	delete(inst.Tags, TagSpecHash)
	delete(inst.Tags, TagClusterID)
	delete(inst.Tags, TagPort)
	var state types.InstanceStateName
	if in.State != nil {
		state = in.State.Name
	}
	switch state {
	case types.InstanceStateNameTerminated:
		return provider.Instance{}, false
	case types.InstanceStateNameRunning:
		if ip := awssdk.ToString(in.PublicIpAddress); ip != "" {
			inst.State, inst.IP = provider.StateRunning, ip
			inst.Port = instancePort(in)
			return inst, true
		}
		inst.State, inst.Message = provider.StateProvisioning, "running, waiting for its public IP"
	case types.InstanceStateNamePending, "":
		inst.State, inst.Message = provider.StateProvisioning, "pending"
	default: // shutting-down, stopping, stopped
		inst.State, inst.Message = provider.StateStopped, string(state)
		if in.StateReason != nil && in.StateReason.Message != nil {
			inst.Message += ": " + *in.StateReason.Message
		}
	}
	return inst, true
}

// delegatedPrefixes are the IPv6 prefixes delegated to the instance's
// primary interface (device index 0), the one the launch asked them on.
func delegatedPrefixes(in types.Instance) []string {
	var out []string
	for _, nic := range in.NetworkInterfaces {
		if nic.Attachment != nil && awssdk.ToInt32(nic.Attachment.DeviceIndex) != 0 {
			continue
		}
		for _, p := range nic.Ipv6Prefixes {
			out = append(out, awssdk.ToString(p.Ipv6Prefix))
		}
	}
	return out
}

// clusterOf is the instance's TagClusterID, "" for none.
func clusterOf(in types.Instance) string {
	for _, t := range in.Tags {
		if awssdk.ToString(t.Key) == TagClusterID {
			return awssdk.ToString(t.Value)
		}
	}
	return ""
}

// instancePort is the proxy port recorded on the instance (TagPort), or
// DefaultPort.
func instancePort(in types.Instance) int32 {
	for _, t := range in.Tags {
		if awssdk.ToString(t.Key) == TagPort {
			if p, err := strconv.ParseInt(awssdk.ToString(t.Value), 10, 32); err == nil && p > 0 && p < 65536 {
				return int32(p)
			}
		}
	}
	return DefaultPort
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
