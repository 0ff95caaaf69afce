// Package compute is a minimal client of the Compute Engine REST API (v1):
// the five calls the gce provider makes and the fields it reads or writes,
// with the API's own JSON names. It replaces google.golang.org/api's
// generated client, whose transport links gRPC and through it html/template:
// a program that links a reflective method call keeps every exported method
// of every type, which made the operator's binary 107 MB instead of 47 MB and
// cost every operator ~21 MiB of resident memory, GCE provider in use or not
// (docs/decisions/0150-gce-provider-talks-compute-engine-through.md).
//
// It does no retries and no logging: the provider classifies errors and the
// controller retries. Request bodies hold cloud-init and credentials, so
// nothing here ever prints one.
package compute

// Instance is a VM: the fields of compute#instance the provider uses.
type Instance struct {
	Name              string              `json:"name,omitempty"`
	Description       string              `json:"description,omitempty"`
	MachineType       string              `json:"machineType,omitempty"`
	Labels            map[string]string   `json:"labels,omitempty"`
	Metadata          *Metadata           `json:"metadata,omitempty"`
	Disks             []*AttachedDisk     `json:"disks,omitempty"`
	NetworkInterfaces []*NetworkInterface `json:"networkInterfaces,omitempty"`
	Tags              *Tags               `json:"tags,omitempty"`
	Scheduling        *Scheduling         `json:"scheduling,omitempty"`

	// Set by Compute Engine.
	Status        string `json:"status,omitempty"`
	StatusMessage string `json:"statusMessage,omitempty"`
	// Zone is the URL of the VM's zone.
	Zone string `json:"zone,omitempty"`
	// CreationTimestamp is when the VM was inserted (RFC 3339).
	CreationTimestamp string `json:"creationTimestamp,omitempty"`
}

// Metadata is the VM's key/value metadata.
type Metadata struct {
	Items []*MetadataItems `json:"items,omitempty"`
}

// MetadataItems is one metadata entry. Value is a pointer because an empty
// value is a value.
type MetadataItems struct {
	Key   string  `json:"key,omitempty"`
	Value *string `json:"value,omitempty"`
}

// AttachedDisk is a disk of the VM.
type AttachedDisk struct {
	Boot             bool                          `json:"boot,omitempty"`
	AutoDelete       bool                          `json:"autoDelete,omitempty"`
	Type             string                        `json:"type,omitempty"`
	InitializeParams *AttachedDiskInitializeParams `json:"initializeParams,omitempty"`
}

// AttachedDiskInitializeParams creates the disk with the VM.
type AttachedDiskInitializeParams struct {
	SourceImage string `json:"sourceImage,omitempty"`
}

// NetworkInterface connects the VM to a network.
type NetworkInterface struct {
	Network       string          `json:"network,omitempty"`
	Subnetwork    string          `json:"subnetwork,omitempty"`
	AccessConfigs []*AccessConfig `json:"accessConfigs,omitempty"`
	// StackType IPV4_IPV6 gives the interface IPv6 besides IPv4.
	StackType string `json:"stackType,omitempty"`
	// Ipv6AccessConfigs: one DIRECT_IPV6 config, an external /96.
	Ipv6AccessConfigs []*AccessConfig `json:"ipv6AccessConfigs,omitempty"`
}

// AccessConfig is an external address of an interface.
type AccessConfig struct {
	Name  string `json:"name,omitempty"`
	Type  string `json:"type,omitempty"`
	NatIP string `json:"natIP,omitempty"`
	// ExternalIpv6 is the first address of a DIRECT_IPV6 config's range,
	// ExternalIpv6PrefixLength its length (96).
	ExternalIpv6             string `json:"externalIpv6,omitempty"`
	ExternalIpv6PrefixLength int64  `json:"externalIpv6PrefixLength,omitempty"`
}

// Tags are the VM's network tags (what firewall rules select).
type Tags struct {
	Items []string `json:"items,omitempty"`
}

// Scheduling says how the VM is scheduled (spot or standard).
type Scheduling struct {
	ProvisioningModel         string `json:"provisioningModel,omitempty"`
	InstanceTerminationAction string `json:"instanceTerminationAction,omitempty"`
	// AutomaticRestart is a pointer because false must be sent.
	AutomaticRestart  *bool  `json:"automaticRestart,omitempty"`
	OnHostMaintenance string `json:"onHostMaintenance,omitempty"`
}

// Operation is a zone operation: what an insert or delete returns.
type Operation struct {
	Name string `json:"name,omitempty"`
	// Status is PENDING, RUNNING or DONE.
	Status              string          `json:"status,omitempty"`
	HttpErrorStatusCode int64           `json:"httpErrorStatusCode,omitempty"`
	Error               *OperationError `json:"error,omitempty"`
}

// OperationError holds the errors of a failed operation.
type OperationError struct {
	Errors []*OperationErrorErrors `json:"errors,omitempty"`
}

// OperationErrorErrors is one error of a failed operation.
type OperationErrorErrors struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// InstanceAggregatedList is one page of instances.aggregatedList: the VMs
// of every zone, keyed by "zones/<zone>".
type InstanceAggregatedList struct {
	Items         map[string]InstancesScopedList `json:"items,omitempty"`
	NextPageToken string                         `json:"nextPageToken,omitempty"`
}

// InstancesScopedList is the VMs of one zone.
type InstancesScopedList struct {
	Instances []*Instance `json:"instances,omitempty"`
}
