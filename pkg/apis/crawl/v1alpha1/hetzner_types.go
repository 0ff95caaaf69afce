package v1alpha1

// HetznerProvider holds the settings of a Hetzner Cloud server. An empty
// location falls back to the operator's --hetzner-location (docs/hetzner.md).
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6ExitRange) || !self.ipv6ExitRange || (has(self.publicIPv6) && self.publicIPv6)",message="spec.hetzner.ipv6ExitRange needs spec.hetzner.publicIPv6: the exit range is the server's public IPv6 /64",fieldPath=".ipv6ExitRange",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.allowFrom) || !has(self.firewallIDs)",message="spec.hetzner.allowFrom and spec.hetzner.firewallIDs are exclusive: the operator's own firewall, or yours",fieldPath=".allowFrom",reason=FieldValueForbidden
type HetznerProvider struct {
	// Location is the Hetzner Cloud location, such as fsn1, nbg1, hel1 or
	// ash. Default: the operator's --hetzner-location.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]+[0-9]*$`
	// +optional
	Location string `json:"location,omitempty"`

	// ServerTypes are tried in order: the next one when Hetzner has none
	// of one left in the location (resource_unavailable).
	// +kubebuilder:default={"cx22"}
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+$`
	// +optional
	ServerTypes []string `json:"serverTypes,omitempty"`

	// Image is the image name or ID the server boots. Default: debian-12.
	// +kubebuilder:default="debian-12"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*$`
	// +optional
	Image string `json:"image,omitempty"`

	// FirewallIDs are Hetzner Cloud firewalls applied to the server at
	// creation. They must admit the proxy port from the operator and from
	// the crawlers, and should admit nothing else (docs/hetzner.md).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Minimum=1
	// +optional
	FirewallIDs []int64 `json:"firewallIDs,omitempty"`

	// AllowFrom makes the operator create, own and apply a firewall of its
	// own that admits the proxy port from these ranges only (the gateway's
	// and the operator's egress) and nothing else (no SSH), applied to the
	// servers by a label. Instead of firewallIDs. Proxies with the same
	// port and ranges share it; it is deleted once no server uses it.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +optional
	AllowFrom []CIDR `json:"allowFrom,omitempty"`

	// PublicIPv6 gives the server a public IPv6 /64 besides its IPv4
	// address (the proxy's egress IP, which it always has).
	// +optional
	PublicIPv6 bool `json:"publicIPv6,omitempty"`

	// IPv6ExitRange sets up the server's public IPv6 /64 at boot as the
	// forward-proxy's exit range (a local route, and ndppd answering the
	// router's neighbour solicitations): one exit address per session
	// (docs/ipv6.md). Needs publicIPv6. status.exitRanges shows the /64.
	// +optional
	IPv6ExitRange bool `json:"ipv6ExitRange,omitempty"`

	// Port is the TCP port the proxy listens on in the server (set up by cloud-init).
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}
