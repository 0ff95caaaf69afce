package v1alpha1

// Names the operator writes onto objects and provider instances (provider.Tags).
const (
	// Finalizer holds a Managed Proxy until its instance is deleted.
	Finalizer = "crawl.proxyfleet.io/instance"
	// SpecHashAnnotation records the hash of the spec (and resolved cloud-init)
	// that the current instance was created from; a mismatch means replace.
	SpecHashAnnotation = "crawl.proxyfleet.io/spec-hash"

	// TagManagedBy marks every provider instance the operator created.
	TagManagedBy = "crawl.proxyfleet.io/managed-by"
	// ManagedByValue is the value of TagManagedBy.
	ManagedByValue = "proxy-operator"
	// TagProxyUID ties an instance to the Proxy it serves; GC keys on it.
	TagProxyUID = "crawl.proxyfleet.io/proxy-uid"
	// TagProxyNamespace and TagProxyName say which Proxy that is, for humans.
	TagProxyNamespace = "crawl.proxyfleet.io/proxy-namespace"
	TagProxyName      = "crawl.proxyfleet.io/proxy-name"

	// AuthUsernameKey and AuthPasswordKey are the keys of the spec.auth Secret.
	AuthUsernameKey = "username"
	AuthPasswordKey = "password"

	// ProxyCredentialsLabel, with the value ProxyCredentialsLabelValue,
	// marks a Secret as meant for proxies: only a Secret that carries it may
	// be named by spec.auth.secretRef or spec.upstream.credentialsSecretRef.
	// The operator reads every Secret, so without this opt-in anyone who may
	// create a Proxy could have it send any Secret of the namespace to an
	// address of their choosing (docs/decisions/0230-credentials-secrets-opt-in-by-label.md).
	ProxyCredentialsLabel      = "crawl.proxyfleet.io/proxy-credentials"
	ProxyCredentialsLabelValue = "true"
)

// Condition types of status.conditions.
const (
	// ConditionProvisioned: the instance exists and runs (always True for External).
	ConditionProvisioned = "Provisioned"
	// ConditionHealthy: probes through the proxy succeed.
	ConditionHealthy = "Healthy"
	// ConditionLeaseBound: the instance checks lease credentials (our
	// forward-proxy with the lease key of its credentials Secret), so a
	// lease's credentials admit only while the lease lives; False: leases on
	// the proxy are advisory (docs/api.md, "What a lease guarantees").
	ConditionLeaseBound = "LeaseBound"
)

// GatewayOnlyLabel, "true" on a Proxy (a pool template's labels), keeps its
// credentials from the lease API's callers: only the gateway tier (a caller
// acting for a user) is granted it, and uses its credentials itself, so a
// proxy network's account password never reaches a crawler
// (docs/upstreams.md).
const GatewayOnlyLabel = "crawl.proxyfleet.io/gateway-only"
