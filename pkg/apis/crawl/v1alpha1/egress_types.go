package v1alpha1

// ProxyEgress adjusts the egress guard of a Managed instance's
// forward-proxy. By default forward-proxy refuses every internal
// destination (loopback, RFC 1918 and unique-local networks, link-local and
// the cloud metadata servers, CGNAT, multicast, unspecified, reserved and
// documentation ranges, and their IPv6 and IPv4-mapped forms) with a 403
// naming the rule, deciding on the addresses a name resolves to. The ranges
// here are passed to the instance as --allow-cidr and --deny-cidr: of the
// ranges containing an address, the most specific decides (deny wins a
// tie), and a metadata server yields only to an allow range at least as
// specific as its own address. On the kubernetes provider the instance's
// Pod also gets an egress NetworkPolicy that allows the same ranges (and
// DNS), a second lock where the cluster's network plugin enforces
// NetworkPolicies.
type ProxyEgress struct {
	// AllowCIDRs admits destinations in these ranges (CIDR notation, such as
	// 10.20.0.0/16 or fd00:1::/64), which the guard refuses by default.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	AllowCIDRs []CIDR `json:"allowCIDRs,omitempty"`

	// DenyCIDRs refuses destinations in these ranges, beside those refused
	// by default (a public range the crawlers must not reach, or a narrower
	// range inside an allowCIDRs entry).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	DenyCIDRs []CIDR `json:"denyCIDRs,omitempty"`
}

// CIDR is an IPv4 or IPv6 range in CIDR notation.
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR range such as 10.0.0.0/8 or fd00::/8"
type CIDR string

// KubernetesAllowFrom lists who, beside the operator, may connect to a Pod
// instance. The provider creates one NetworkPolicy per instance (named like
// the Pod, deleted with it) selecting that Pod, with one ingress rule for
// the proxy port: from the operator's and the gateway's Pods (label
// app.kubernetes.io/name=proxy-operator in the operator's namespace), which
// probe it and relay crawlers' requests, and from every Pod of the
// namespaces listed here, where the crawlers holding leases run. It takes
// effect where the cluster's network plugin enforces NetworkPolicies.
type KubernetesAllowFrom struct {
	// Namespaces whose Pods may connect to the proxy. Empty: the operator
	// only.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
}
