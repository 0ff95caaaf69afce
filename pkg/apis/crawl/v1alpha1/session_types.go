package v1alpha1

// SessionProvider makes a Proxy one session of another Proxy of its
// namespace, the instance, whose forward-proxy leaves from exit ranges
// (status.exitRanges, docs/ipv6.md). Nothing is created: the session is the
// instance's address with the username <instance's username>+session-<id>,
// the id derived from this Proxy's UID, which picks one address of the
// range. A new Proxy is a new session, so a new exit address. A pool with
// spec.membersPerInstance writes these fields; a user may too.
type SessionProvider struct {
	// Instance names the Proxy whose forward-proxy serves the session.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Instance string `json:"instance"`

	// Endpoint is where the instance serves (its status.ip and port).
	Endpoint Endpoint `json:"endpoint"`

	// CredentialsSecretRef names the instance's credentials Secret (its
	// generated one, or its spec.auth's), marked for proxies: the session's
	// username is its username plus +session-<id>, its password the same.
	CredentialsSecretRef LocalSecretRef `json:"credentialsSecretRef"`
}
