package v1alpha1

// AzureProvider holds the settings of an Azure virtual machine. The
// subscription and resource group are the operator's (--azure-subscription-id,
// --azure-resource-group): the operator's role is assigned on that one group
// (docs/azure.md). An empty location or subnetID falls back to the
// operator's --azure-location and --azure-subnet-id.
type AzureProvider struct {
	// Location is the Azure region, such as westeurope or eastus2.
	// Default: the operator's --azure-location.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]+[a-z0-9]*$`
	// +optional
	Location string `json:"location,omitempty"`

	// VMSizes are tried in order: the next one when Azure has none of one
	// left (SkuNotAvailable, AllocationFailed, ZonalAllocationFailed).
	// +kubebuilder:default={"Standard_B1s"}
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_]+$`
	// +optional
	VMSizes []string `json:"vmSizes,omitempty"`

	// Image is the marketplace image the VM boots. Default: Debian 12
	// (Debian debian-12 12-gen2 latest).
	// +optional
	Image *AzureImage `json:"image,omitempty"`

	// SubnetID is the resource ID of an existing subnet the VM's network
	// interface joins. Default: the operator's --azure-subnet-id.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$`
	// +optional
	SubnetID string `json:"subnetID,omitempty"`

	// AllowFrom makes the operator create, own and attach a network
	// security group that admits the proxy port from these ranges only
	// (the gateway's and the operator's egress) and nothing else (no SSH).
	// The group is deleted once no network interface uses it. Empty: no
	// group of the operator's; the subnet's own group, if any, applies.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	AllowFrom []CIDR `json:"allowFrom,omitempty"`

	// Port is the TCP port the proxy listens on in the VM (set up by cloud-init).
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// AzureImage is a marketplace image reference.
type AzureImage struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Publisher string `json:"publisher"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Offer string `json:"offer"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	SKU string `json:"sku"`
	// Version is an image version or "latest".
	// +kubebuilder:default="latest"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(latest|[0-9]+\.[0-9]+\.[0-9]+)$`
	// +optional
	Version string `json:"version,omitempty"`
}
