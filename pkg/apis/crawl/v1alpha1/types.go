package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=px,categories=crawl
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`
// +kubebuilder:printcolumn:name="Exit-IP",type=string,JSONPath=`.status.exitIP`
// +kubebuilder:printcolumn:name="Exit-Country",type=string,JSONPath=`.status.exitCountry`,priority=1,description="ISO 3166-1 alpha-2 country of the exit IP (kubectl get -o wide)"
// +kubebuilder:printcolumn:name="Latency",type=integer,JSONPath=`.status.latencyMillis`,description="Latency of the latest reported health probe, in milliseconds"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Proxy is a forward HTTP(S) proxy for web crawlers. A Managed proxy is an
// instance that the operator creates through a provider, replaces when its
// spec or cloud-init changes, and deletes with the object; an External proxy
// points at an existing host:port. Every proxy is probed through itself, and
// Ready proxies are handed to crawler workers by the lease API.
type Proxy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired proxy.
	Spec ProxySpec `json:"spec"`

	// Status is the proxy as the operator last observed it.
	// +optional
	Status ProxyStatus `json:"status,omitempty"`
}

// ProxyMode says who runs the proxy.
// +enum
type ProxyMode string

const (
	// ModeManaged: the operator creates and owns the instance through a provider.
	ModeManaged ProxyMode = "Managed"
	// ModeExternal: the proxy already exists at spec.endpoint; the operator only probes and leases it.
	ModeExternal ProxyMode = "External"
)

// ProviderName names a provider of Managed proxy instances.
// +enum
type ProviderName string

const (
	// ProviderKubernetes runs each instance as a Pod in the Proxy's namespace.
	ProviderKubernetes ProviderName = "kubernetes"
	// ProviderLocal runs each instance as a forward-proxy process on the operator's host (development).
	ProviderLocal ProviderName = "local"
	// ProviderGCE runs each instance as a Compute Engine VM.
	ProviderGCE ProviderName = "gce"
	// ProviderAWS runs each instance as an EC2 instance.
	ProviderAWS ProviderName = "aws"
	// ProviderHetzner runs each instance as a Hetzner Cloud server.
	ProviderHetzner ProviderName = "hetzner"
	// ProviderDigitalOcean runs each instance as a DigitalOcean droplet.
	ProviderDigitalOcean ProviderName = "digitalocean"
	// ProviderAzure runs each instance as an Azure virtual machine.
	ProviderAzure ProviderName = "azure"
	// ProviderUpstream makes the Proxy a sticky session of a commercial
	// proxy network's super proxy (upstream_types.go).
	ProviderUpstream ProviderName = "upstream"
	// ProviderSession makes the Proxy a session of another Proxy's
	// forward-proxy that has exit ranges: one address of its range, picked
	// by the session id (session_types.go).
	ProviderSession ProviderName = "session"
)

// ProxySpec is the desired state of a Proxy.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Managed' || has(self.provider)",message="spec.provider is required when spec.mode is Managed",fieldPath=".provider",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || has(self.endpoint)",message="spec.endpoint is required when spec.mode is External",fieldPath=".endpoint",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.provider)",message="spec.provider must not be set when spec.mode is External",fieldPath=".provider",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.cloudInit)",message="spec.cloudInit must not be set when spec.mode is External",fieldPath=".cloudInit",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.mode != 'Managed' || !has(self.endpoint)",message="spec.endpoint must not be set when spec.mode is Managed (the provider assigns the address)",fieldPath=".endpoint",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.mode == 'External' || !has(self.exitRanges)",message="spec.exitRanges must not be set when spec.mode is Managed (spec.local.exitRanges declares a local instance's; a cloud provider reports its own)",fieldPath=".exitRanges",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.egress)",message="spec.egress must not be set when spec.mode is External (the operator does not run that proxy)",fieldPath=".egress",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.kubernetes) || (has(self.provider) && self.provider == 'kubernetes')",message="spec.kubernetes is only allowed when spec.provider is kubernetes",fieldPath=".kubernetes",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.local) || (has(self.provider) && self.provider == 'local')",message="spec.local is only allowed when spec.provider is local",fieldPath=".local",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.gce) || (has(self.provider) && self.provider == 'gce')",message="spec.gce is only allowed when spec.provider is gce",fieldPath=".gce",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.aws) || (has(self.provider) && self.provider == 'aws')",message="spec.aws is only allowed when spec.provider is aws",fieldPath=".aws",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.hetzner) || (has(self.provider) && self.provider == 'hetzner')",message="spec.hetzner is only allowed when spec.provider is hetzner",fieldPath=".hetzner",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.digitalocean) || (has(self.provider) && self.provider == 'digitalocean')",message="spec.digitalocean is only allowed when spec.provider is digitalocean",fieldPath=".digitalocean",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.azure) || (has(self.provider) && self.provider == 'azure')",message="spec.azure is only allowed when spec.provider is azure",fieldPath=".azure",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.upstream) || (has(self.provider) && self.provider == 'upstream')",message="spec.upstream is only allowed when spec.provider is upstream",fieldPath=".upstream",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'upstream' || has(self.upstream)",message="spec.upstream is required when spec.provider is upstream",fieldPath=".upstream",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.session) || (has(self.provider) && self.provider == 'session')",message="spec.session is only allowed when spec.provider is session",fieldPath=".session",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'session' || has(self.session)",message="spec.session is required when spec.provider is session",fieldPath=".session",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'session' || (!has(self.auth) && !has(self.cloudInit) && !has(self.egress))",message="spec.auth, spec.cloudInit and spec.egress must not be set when spec.provider is session (the instance's credentials and egress guard apply)",fieldPath=".provider",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'upstream' || (!has(self.auth) && !has(self.cloudInit) && !has(self.egress))",message="spec.auth, spec.cloudInit and spec.egress must not be set when spec.provider is upstream (the network's username and password come from spec.upstream)",fieldPath=".provider",reason=FieldValueForbidden
type ProxySpec struct {
	// Mode says who runs the proxy: Managed (the operator creates the instance
	// through spec.provider) or External (an existing proxy at spec.endpoint).
	// Immutable.
	// +kubebuilder:validation:Enum=Managed;External
	// +kubebuilder:default=Managed
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.mode is immutable: delete and recreate the Proxy to change it"
	// +optional
	Mode ProxyMode `json:"mode,omitempty"`

	// Provider creates the instance of a Managed proxy: one of the values
	// below, each the name of the block that holds its settings and says
	// what its instance is (spec.gce for gce). Required when mode is
	// Managed, forbidden when External. Changing it replaces the instance.
	// +kubebuilder:validation:Enum=kubernetes;local;gce;aws;hetzner;digitalocean;azure;upstream;session
	// +optional
	Provider ProviderName `json:"provider,omitempty"`

	// Kubernetes holds settings for the kubernetes provider, whose instance is
	// a Pod.
	// +optional
	Kubernetes *KubernetesProvider `json:"kubernetes,omitempty"`

	// Local holds settings for the local provider, whose instance is a process
	// on the operator's host, for development.
	// +optional
	Local *LocalProvider `json:"local,omitempty"`

	// GCE holds settings for the gce provider, whose instance is a Compute
	// Engine VM.
	// +optional
	GCE *GCEProvider `json:"gce,omitempty"`

	// AWS holds settings for the aws provider, whose instance is an EC2
	// instance.
	// +optional
	AWS *AWSProvider `json:"aws,omitempty"`

	// Hetzner holds settings for the hetzner provider, whose instance is a
	// Hetzner Cloud server.
	// +optional
	Hetzner *HetznerProvider `json:"hetzner,omitempty"`

	// DigitalOcean holds settings for the digitalocean provider, whose
	// instance is a DigitalOcean droplet.
	// +optional
	DigitalOcean *DigitalOceanProvider `json:"digitalocean,omitempty"`

	// Azure holds settings for the azure provider, whose instance is an Azure
	// VM.
	// +optional
	Azure *AzureProvider `json:"azure,omitempty"`

	// Upstream holds settings for the upstream provider, whose instance is a
	// session of a proxy network's super proxy.
	// +optional
	Upstream *UpstreamProvider `json:"upstream,omitempty"`

	// Session holds settings for the session provider, whose instance is a
	// session of another Proxy with exit ranges.
	// +optional
	Session *SessionProvider `json:"session,omitempty"`

	// CloudInit is the user-data that configures a Managed instance at boot.
	// Its content is part of the instance's identity: changing it, or the
	// Secret it names, replaces the instance. Forbidden when mode is External.
	// +optional
	CloudInit *CloudInit `json:"cloudInit,omitempty"`

	// Endpoint is the address of an External proxy. Required when mode is
	// External, forbidden when Managed.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// ExitRanges are the prefixes (CIDRs) an External proxy leaves from,
	// one address per session, as its operator started it with
	// --exit-range (docs/ipv6.md); the operator reports them in
	// status.exitRanges, and sessions (spec.provider session) may be put on
	// it. Forbidden when mode is Managed: a local instance's are
	// spec.local.exitRanges, a cloud's come from its provider.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ExitRanges []CIDR `json:"exitRanges,omitempty"`

	// Auth names the credentials the proxy requires (HTTP basic auth). They
	// are used by health probes and handed to authorised lease holders; they
	// are never logged.
	// +optional
	Auth *ProxyAuth `json:"auth,omitempty"`

	// Egress adjusts what a Managed instance may connect to (see
	// egress_types.go). Forbidden when mode is External. Changing it
	// replaces the instance.
	// +optional
	Egress *ProxyEgress `json:"egress,omitempty"`

	// HealthCheck says how the proxy is probed: a URL is fetched through the
	// proxy at every interval, and the verdict flips at the thresholds.
	// Changing it never replaces the instance.
	// +kubebuilder:default={}
	// +optional
	HealthCheck HealthCheck `json:"healthCheck,omitempty"`

	// MaxLeases is how many leases may hold this proxy at once; 1 makes every
	// lease exclusive. Changing it never replaces the instance.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxLeases int32 `json:"maxLeases,omitempty"`
}

// KubernetesProvider holds the settings of a Pod instance.
type KubernetesProvider struct {
	// Image is the container image of the proxy. Default: the operator's
	// forward-proxy image (flag --kubernetes-default-image).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Port is the TCP port the proxy listens on inside the Pod.
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Resources are the proxy container's compute resources. Default: small
	// requests sized for the forward-proxy.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains the Pod to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the Pod run on tainted nodes.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// AllowFrom, when set, adds an ingress rule to the Pod's NetworkPolicy
	// that admits connections to the proxy port only from the operator's
	// and the gateway's Pods and from the namespaces listed
	// (egress_types.go). Unset: ingress is not restricted (the policy
	// restricts egress only, spec.egress).
	// +optional
	AllowFrom *KubernetesAllowFrom `json:"allowFrom,omitempty"`
}

// LocalProvider holds the settings of a local-process instance: the
// operator picks a free loopback port and runs its own forward-proxy binary.
type LocalProvider struct {
	// ExitRanges are the prefixes (CIDRs) the instance leaves from, one
	// address per session (--exit-range, docs/ipv6.md); they must be routed
	// to the operator's host. Empty: the host's own address. Changing them
	// replaces the instance.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ExitRanges []CIDR `json:"exitRanges,omitempty"`
}

// GCEProvider holds the settings of a Compute Engine VM instance. Empty
// project and zone fall back to the operator's flags.
type GCEProvider struct {
	// Project is the Google Cloud project ID. Default: the operator's --gce-project.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Project string `json:"project,omitempty"`

	// Zone is the Compute Engine zone, such as europe-west1-b. Default: the operator's --gce-zone.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Zone string `json:"zone,omitempty"`

	// MachineType is the VM's machine type, such as e2-small.
	// +kubebuilder:default="e2-micro"
	// +kubebuilder:validation:MaxLength=128
	// +optional
	MachineType string `json:"machineType,omitempty"`

	// SourceImage is the boot disk image, as a URL or a family path.
	// +kubebuilder:default="projects/debian-cloud/global/images/family/debian-12"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	SourceImage string `json:"sourceImage,omitempty"`

	// Network is the VPC network. Default: the project's default network.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Network string `json:"network,omitempty"`

	// Subnetwork is the subnetwork in the zone's region.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Subnetwork string `json:"subnetwork,omitempty"`

	// NetworkTags are Compute Engine network tags, used by firewall rules to
	// open the proxy port.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	NetworkTags []string `json:"networkTags,omitempty"`

	// Spot asks for a Spot VM: cheaper, and may be preempted (the operator
	// then replaces it).
	// +optional
	Spot bool `json:"spot,omitempty"`

	// IPv6ExitRange gives the VM an external IPv6 /96 (stack type
	// IPV4_IPV6; the subnetwork must be dual-stack with external IPv6) and
	// names it in the VM's metadata as the forward-proxy's exit range: one
	// exit address per session (docs/ipv6.md). status.exitRanges shows it.
	// +optional
	IPv6ExitRange bool `json:"ipv6ExitRange,omitempty"`

	// Port is the TCP port the proxy listens on in the VM (set up by cloud-init).
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// CloudInit is user-data for a Managed instance: exactly one of inline or secretRef.
// +kubebuilder:validation:XValidation:rule="has(self.inline) != has(self.secretRef)",message="exactly one of spec.cloudInit.inline or spec.cloudInit.secretRef must be set"
type CloudInit struct {
	// Inline is the user-data itself. Use secretRef for anything secret.
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	Inline *string `json:"inline,omitempty"`

	// SecretRef names a Secret in the Proxy's namespace holding the user-data.
	// Rotating that Secret replaces the instance.
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`
}

// SecretKeyRef names one key of a Secret in the Proxy's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key is the key within the Secret.
	// +kubebuilder:default="user-data"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// EndpointScheme is how the operator and crawlers talk to an External proxy.
// +enum
type EndpointScheme string

const (
	// SchemeHTTP: plain HTTP to the proxy (CONNECT still carries TLS to https targets).
	SchemeHTTP EndpointScheme = "http"
	// SchemeHTTPS: TLS to the proxy itself.
	SchemeHTTPS EndpointScheme = "https"
)

// Endpoint is the address of an External proxy.
type Endpoint struct {
	// Host is the proxy's DNS name or IP address.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$`
	Host string `json:"host"`

	// Port is the proxy's TCP port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// Scheme is http (plain connection to the proxy) or https (TLS to the proxy itself).
	// +kubebuilder:validation:Enum=http;https
	// +kubebuilder:default=http
	// +optional
	Scheme EndpointScheme `json:"scheme,omitempty"`
}

// ProxyAuth names the proxy's basic-auth credentials.
type ProxyAuth struct {
	// SecretRef names a Secret in the Proxy's namespace with the keys
	// `username` and `password`. The Secret must carry the label
	// `crawl.proxyfleet.io/proxy-credentials: "true"`, which says it is
	// meant for proxies; until it does, the Proxy is not Ready and nothing
	// is sent with it.
	SecretRef LocalSecretRef `json:"secretRef"`
}

// LocalSecretRef names a Secret in the Proxy's namespace.
type LocalSecretRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// HealthCheck says how a proxy is probed through itself.
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || !has(self.interval) || duration(self.timeout) < duration(self.interval)",message="spec.healthCheck.timeout must be less than spec.healthCheck.interval",fieldPath=".timeout"
// +kubebuilder:validation:XValidation:rule="!(has(self.exitIPFromBody) && self.exitIPFromBody) || !has(self.exitInfo)",message="spec.healthCheck.exitInfo and spec.healthCheck.exitIPFromBody are exclusive: exitInfo reads the exit IP from the JSON answer",fieldPath=".exitInfo",reason=FieldValueForbidden
type HealthCheck struct {
	// URL is the target fetched through the proxy. An https URL is reached
	// with CONNECT and TLS through the tunnel, so it exercises both.
	// +kubebuilder:default="https://www.gstatic.com/generate_204"
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="spec.healthCheck.url must be an absolute http or https URL"
	// +optional
	URL string `json:"url,omitempty"`

	// ExpectedStatus is the HTTP status a healthy probe gets from url.
	// +kubebuilder:default=204
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	// +optional
	ExpectedStatus int32 `json:"expectedStatus,omitempty"`

	// Interval is the time between probes (Go duration, at least 1s).
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="spec.healthCheck.interval must be between 1s and 24h"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Timeout bounds one probe (Go duration, above zero and less than interval).
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.healthCheck.timeout must be above zero"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// SuccessThreshold is how many consecutive successful probes make an
	// unhealthy (or new) proxy healthy.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	SuccessThreshold int32 `json:"successThreshold,omitempty"`

	// FailureThreshold is how many consecutive failed probes make a healthy
	// (or new) proxy unhealthy.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	FailureThreshold int32 `json:"failureThreshold,omitempty"`

	// TLS tunes certificate checks of an https url (and of an https endpoint).
	// +optional
	TLS *HealthCheckTLS `json:"tls,omitempty"`

	// ExitIPFromBody says that url answers with the client's address as
	// its body (an echo such as https://api.ipify.org): each successful
	// probe records it in status.exitIP, and a pool re-rolls a member
	// whose exit IP another member has already.
	// +optional
	ExitIPFromBody bool `json:"exitIPFromBody,omitempty"`

	// ExitInfo says that url answers a JSON object describing the client's
	// address, as ipinfo-like services do ({"ip":"203.0.113.7","country":"DE"}):
	// each successful probe records the address in status.exitIP and the
	// country in status.exitCountry (docs/geography.md). Exclusive with
	// exitIPFromBody.
	// +optional
	ExitInfo *ExitInfo `json:"exitInfo,omitempty"`
}

// ExitInfo names the members of a JSON echo's answer. A name may be a
// dotted path into nested objects (location.country_code).
type ExitInfo struct {
	// IPField is the member holding the client's IP address; a probe whose
	// answer lacks it fails.
	// +kubebuilder:default=ip
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	// +optional
	IPField string `json:"ipField,omitempty"`

	// CountryField is the member holding the ISO 3166-1 alpha-2 country
	// code of that address (either case); an answer without a two-letter
	// code there leaves the country to the operator's GeoIP database
	// (--geoip-database), if any.
	// +kubebuilder:default=country
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	// +optional
	CountryField string `json:"countryField,omitempty"`
}

// HealthCheckTLS tunes TLS verification of probes.
type HealthCheckTLS struct {
	// InsecureSkipVerify accepts any certificate. For test targets only.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// ServerName overrides the name checked against the certificate (SNI).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// ProxyPhase is a one-word summary of a Proxy, derived from its conditions.
// +enum
type ProxyPhase string

const (
	// PhasePending: accepted, nothing provisioned yet.
	PhasePending ProxyPhase = "Pending"
	// PhaseProvisioning: the instance is being created or replaced.
	PhaseProvisioning ProxyPhase = "Provisioning"
	// PhaseReady: provisioned and healthy; it can be leased.
	PhaseReady ProxyPhase = "Ready"
	// PhaseUnhealthy: provisioned, but probes fail.
	PhaseUnhealthy ProxyPhase = "Unhealthy"
	// PhaseFailed: a permanent error; nothing happens until the spec changes.
	PhaseFailed ProxyPhase = "Failed"
	// PhaseDeleting: the instance is being deleted with the object.
	PhaseDeleting ProxyPhase = "Deleting"
)

// ProxyStatus is the observed state of a Proxy.
type ProxyStatus struct {
	// Phase summarises the conditions: Pending, Provisioning, Ready,
	// Unhealthy, Failed or Deleting.
	// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Unhealthy;Failed;Deleting
	// +optional
	Phase ProxyPhase `json:"phase,omitempty"`

	// ProviderID identifies the instance at its provider.
	// +optional
	ProviderID string `json:"providerID,omitempty"`

	// IP is the address crawlers reach the proxy at.
	// +optional
	IP string `json:"ip,omitempty"`

	// Port is the port crawlers reach the proxy at.
	// +optional
	Port int32 `json:"port,omitempty"`

	// ExitIP is the address sites see requests through the proxy come
	// from, as the health check's target last answered it
	// (spec.healthCheck.exitIPFromBody); empty when not measured. For a
	// proxy network's session it differs from ip, which is the super proxy.
	// +optional
	ExitIP string `json:"exitIP,omitempty"`

	// ExitCountry is the ISO 3166-1 alpha-2 code (upper case) of the
	// country exitIP is in: from the health check's JSON answer
	// (spec.healthCheck.exitInfo.countryField) when it names one, else from
	// the operator's GeoIP database (--geoip-database); empty when neither
	// knows. A pool labels its members with it (crawl.proxyfleet.io/exit-country).
	// +kubebuilder:validation:Pattern=`^[A-Z]{2}$`
	// +optional
	ExitCountry string `json:"exitCountry,omitempty"`

	// ExitRanges are the prefixes (CIDRs) the instance leaves from, one
	// address per session (docs/ipv6.md): what the provider reports (a
	// cloud's delegated prefix) or the spec declares. Empty: one exit.
	// +listType=atomic
	// +optional
	ExitRanges []string `json:"exitRanges,omitempty"`

	// Conditions: Provisioned (the instance exists and runs) and Healthy
	// (probes through the proxy succeed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LatencyMillis is the round-trip time of the latest reported probe, in
	// milliseconds. It is updated on a verdict change or a material latency
	// change, not on every probe.
	// +optional
	LatencyMillis int64 `json:"latencyMillis,omitempty"`

	// LastHealthCheckTime is when the probe behind the current Healthy
	// condition and latency ran. Probe recency is a metric, not a status field.
	// +optional
	LastHealthCheckTime *metav1.Time `json:"lastHealthCheckTime,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// ProxyList is a list of Proxies.
type ProxyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the Proxies.
	Items []Proxy `json:"items"`
}
