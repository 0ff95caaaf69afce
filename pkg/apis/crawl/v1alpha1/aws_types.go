package v1alpha1

// AWSProvider holds the settings of an EC2 instance. An empty region falls
// back to the operator's --aws-region (docs/aws.md).
// +kubebuilder:validation:XValidation:rule="!has(self.allowFrom) || !has(self.securityGroupIDs)",message="spec.aws.allowFrom and spec.aws.securityGroupIDs are exclusive: the operator's own security group, or yours",fieldPath=".allowFrom",reason=FieldValueForbidden
type AWSProvider struct {
	// Region is the AWS Region, such as eu-west-1. Default: the operator's --aws-region.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]{2}(-[a-z]+)+-[0-9]+$`
	// +optional
	Region string `json:"region,omitempty"`

	// InstanceTypes are tried in order: the next one when EC2 has no
	// capacity for one (InsufficientInstanceCapacity) or does not offer it
	// in the subnet's zone (Unsupported).
	// +kubebuilder:default={"t3.micro"}
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+\.[a-z0-9-]+$`
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`

	// SubnetIDs are the subnets an instance may go to; each Proxy starts at
	// one chosen from its UID, so a fleet spreads over the subnets (and their
	// availability zones), and moves on to the next on a capacity error.
	// Empty: EC2 picks a default subnet of the region's default VPC.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^subnet-[0-9a-f]{8,17}$`
	// +optional
	SubnetIDs []string `json:"subnetIDs,omitempty"`

	// SecurityGroupIDs are attached to the instance. They must admit the
	// proxy port from the operator and from the crawlers (docs/aws.md).
	// Empty, and allowFrom empty: the VPC's default security group.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Pattern=`^sg-[0-9a-f]{8,17}$`
	// +optional
	SecurityGroupIDs []string `json:"securityGroupIDs,omitempty"`

	// AllowFrom makes the operator create, own and attach a security group
	// of its own, in the subnets' VPC, that admits the proxy port from these
	// ranges only (the gateway's and the operator's egress) and nothing else
	// (no SSH). Instead of securityGroupIDs. The group is deleted once no
	// instance uses it.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +optional
	AllowFrom []CIDR `json:"allowFrom,omitempty"`

	// Image is the AMI the instance boots. Default: the SSM public parameter
	// of Debian 12 on amd64.
	// +optional
	Image *AWSImage `json:"image,omitempty"`

	// Spot asks for a Spot instance: cheaper, and interrupted when EC2 needs
	// the capacity back (the operator then replaces it). Unset: on-demand.
	// +optional
	Spot *AWSSpot `json:"spot,omitempty"`

	// IPv6ExitRange asks EC2 for an IPv6 /80 prefix delegated to the
	// instance's interface (prefix delegation; the subnets must have an
	// IPv6 CIDR), and sets it up at boot as the forward-proxy's exit range:
	// one exit address per session (docs/ipv6.md). status.exitRanges shows
	// the prefix.
	// +optional
	IPv6ExitRange bool `json:"ipv6ExitRange,omitempty"`

	// Port is the TCP port the proxy listens on in the instance (set up by cloud-init).
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// AWSImage names an AMI: exactly one of id or ssmParameter.
// +kubebuilder:validation:XValidation:rule="has(self.id) != has(self.ssmParameter)",message="exactly one of spec.aws.image.id or spec.aws.image.ssmParameter must be set"
type AWSImage struct {
	// ID is an AMI ID of the region, such as ami-0123456789abcdef0.
	// +kubebuilder:validation:Pattern=`^ami-[0-9a-f]{8,17}$`
	// +optional
	ID string `json:"id,omitempty"`

	// SSMParameter is the name of an SSM parameter holding an AMI ID, such
	// as the public /aws/service/debian/release/12/latest/amd64; EC2
	// resolves it at launch, so each new instance boots the latest image.
	// +kubebuilder:validation:MaxLength=1011
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9_./-]+$`
	// +optional
	SSMParameter string `json:"ssmParameter,omitempty"`
}

// AWSSpot holds the settings of a Spot instance.
type AWSSpot struct {
	// MaxPrice is the most to pay per instance-hour, in US dollars, such as
	// "0.0050". Unset: up to the on-demand price (AWS's recommendation).
	// +kubebuilder:validation:Pattern=`^[0-9]{1,4}(\.[0-9]{1,6})?$`
	// +optional
	MaxPrice string `json:"maxPrice,omitempty"`
}
