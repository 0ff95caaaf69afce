package v1alpha1

// DigitalOceanProvider holds the settings of a DigitalOcean droplet. An
// empty region falls back to the operator's --digitalocean-region
// (docs/digitalocean.md).
type DigitalOceanProvider struct {
	// Region is the DigitalOcean region slug, such as nyc3, ams3, fra1 or
	// sgp1. Default: the operator's --digitalocean-region.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[a-z]+[0-9]*$`
	// +optional
	Region string `json:"region,omitempty"`

	// Sizes are droplet size slugs tried in order: the next one when the
	// region has none of one left (422 "size is not available").
	// +kubebuilder:default={"s-1vcpu-512mb-10gb"}
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=48
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+$`
	// +optional
	Sizes []string `json:"sizes,omitempty"`

	// Image is the image slug or numeric ID the droplet boots. Default:
	// debian-12-x64.
	// +kubebuilder:default="debian-12-x64"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*$`
	// +optional
	Image string `json:"image,omitempty"`

	// Tags are extra DigitalOcean tags on the droplet, besides the
	// operator's own (which start with "pxo:"). A cloud firewall that
	// applies to one of them guards the droplet (docs/digitalocean.md).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9_][a-zA-Z0-9_:-]*$`
	// +kubebuilder:validation:XValidation:rule="self.all(t, !t.startsWith('pxo:'))",message="tags starting with pxo: are the operator's own"
	// +optional
	Tags []string `json:"tags,omitempty"`

	// VPCUUID places the droplet's private interface in this VPC; empty:
	// the region's default VPC.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	// +optional
	VPCUUID string `json:"vpcUUID,omitempty"`

	// AllowFrom makes the operator create and own a cloud firewall that
	// admits the proxy port from these ranges only (the gateway's and the
	// operator's egress) and nothing else inbound (no SSH), applied to the
	// droplets by a tag of its own. Proxies with the same port and ranges
	// share it; it is deleted once no droplet carries its tag.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +optional
	AllowFrom []CIDR `json:"allowFrom,omitempty"`

	// IPv6 gives the droplet a public IPv6 address besides its IPv4
	// address (the proxy's egress IP, which it always has).
	// +optional
	IPv6 bool `json:"ipv6,omitempty"`

	// Port is the TCP port the proxy listens on in the droplet (set up by cloud-init).
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}
