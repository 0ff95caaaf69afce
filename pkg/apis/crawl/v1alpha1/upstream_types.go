package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// UpstreamProvider makes the Proxy one sticky session of a commercial proxy
// network (docs/upstreams.md): the network sells one "super proxy"
// address, and the username chooses the IP behind it. The Proxy's session
// id derives from its UID, so each Proxy (each pool member) is one exit IP;
// a new member is a new session and so a new IP. Nothing is provisioned.
// +kubebuilder:validation:XValidation:rule="!self.usernameTemplate.contains('{country}') || (has(self.countries) && size(self.countries) > 0)",message="spec.upstream.countries is required when spec.upstream.usernameTemplate uses {country}",fieldPath=".countries",reason=FieldValueRequired
type UpstreamProvider struct {
	// Endpoint is the network's super proxy, reached with HTTP (CONNECT for
	// https targets).
	Endpoint Endpoint `json:"endpoint"`

	// CredentialsSecretRef names a Secret in the Proxy's namespace whose key
	// `password` is the account's password. The Secret must carry the label
	// `crawl.proxyfleet.io/proxy-credentials: "true"`, which says it is
	// meant for proxies; until it does, the Proxy is not Ready and nothing
	// is sent with it. It is copied into each member's generated
	// credentials Secret, never into status, logs or events.
	CredentialsSecretRef LocalSecretRef `json:"credentialsSecretRef"`

	// UsernameTemplate is the username the network expects, with
	// placeholders: {session} (required: the member's session id, 16
	// lowercase hex digits), {country} (one of countries) and
	// {lifetimeMinutes} (sessionLifetime in whole minutes). For example
	// customer-acme-zone-res-country-{country}-session-{session}.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.contains('{session}')",message="spec.upstream.usernameTemplate must contain {session}: without it every member would be one IP"
	// +kubebuilder:validation:XValidation:rule="!self.contains(':')",message="spec.upstream.usernameTemplate must not contain ':' (basic auth splits there)"
	// +kubebuilder:validation:XValidation:rule="self.replace('{session}', '').replace('{country}', '').replace('{lifetimeMinutes}', '').matches('^[^{}]*$')",message="spec.upstream.usernameTemplate: the placeholders are {session}, {country} and {lifetimeMinutes}"
	UsernameTemplate string `json:"usernameTemplate"`

	// Countries are the values of {country}; each member uses one, chosen
	// from its UID, so a pool spreads over them.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_-]+$`
	// +optional
	Countries []string `json:"countries,omitempty"`

	// SessionLifetime is how long the network keeps a session on one IP.
	// A pool recycles its members before their session's lifetime ends
	// (as for maxAge: a new member, leases drained first); a standalone
	// Proxy keeps its session and the network may move it to another IP,
	// which status.exitIP then shows.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="spec.upstream.sessionLifetime must be between 1m and 168h"
	// +optional
	SessionLifetime *metav1.Duration `json:"sessionLifetime,omitempty"`
}
