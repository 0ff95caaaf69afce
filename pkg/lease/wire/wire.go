// Package wire is the JSON of the lease API (docs/api.md), written once and
// shared by the server (pkg/lease/server) and the Go client (pkg/lease/client).
//
// It holds types, error codes and the spelling rules of the members both
// sides check (a country code), no other behaviour, and depends on the
// standard library only, so that the client stays free of client-go. The
// server's strict decoder (pkg/lease/decode.go) accepts exactly the members
// named by AcquireRequest's and RenewRequest's tags.
package wire

import "time"

// AcquireRequest is the body of POST /v1/leases. Durations are Go duration
// strings; empty members mean "not given".
type AcquireRequest struct {
	Holder    string `json:"holder"`
	Namespace string `json:"namespace,omitempty"`
	Selector  string `json:"selector,omitempty"`
	TTL       string `json:"ttl,omitempty"`
	Domain    string `json:"domain,omitempty"`
	Session   string `json:"session,omitempty"`
	Wait      string `json:"wait,omitempty"`
	// Country asks for a proxy whose measured exit country
	// (status.exitCountry) is this ISO 3166-1 alpha-2 code, either case.
	Country string `json:"country,omitempty"`
}

// RenewRequest is the body of POST /v1/leases/{id}/renew (optional).
type RenewRequest struct {
	TTL string `json:"ttl,omitempty"`
	// OKRequests is a decimal count of the requests that went well on the
	// lease since the last report, counted as ok outcomes (a lease kept
	// for many requests, such as a sticky session's).
	OKRequests string `json:"okRequests,omitempty"`
	// TransferredBytes is a decimal count of the bytes moved through the
	// lease's proxy since the last report, counted for its pool's usage.
	TransferredBytes string `json:"transferredBytes,omitempty"`
}

// Lease is a lease as the API answers it.
type Lease struct {
	ID     string   `json:"id"`
	Holder string   `json:"holder"`
	Proxy  ProxyRef `json:"proxy"`
	// Credentials are in the grant only (201), when the proxy has spec.auth.
	Credentials *Credentials `json:"credentials,omitempty"`
	Session     string       `json:"session,omitempty"`
	Domain      string       `json:"domain,omitempty"`
	// State is the session state kept for the proxy and domain, in the
	// grant only (base64 in JSON).
	State     []byte    `json:"state,omitempty"`
	TTL       string    `json:"ttl"`
	GrantedAt time.Time `json:"grantedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ProxyRef is the proxy a lease holds.
type ProxyRef struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	URL           string `json:"url"`
	LatencyMillis int64  `json:"latencyMillis"`
	// Pool is the ProxyPool the proxy is a member of, omitted if none.
	Pool string `json:"pool,omitempty"`
}

// Credentials are a proxy's basic-auth credentials.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Proxy is a Ready proxy as discovery (GET /v1/proxies) lists it.
type Proxy struct {
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	URL           string            `json:"url"`
	Labels        map[string]string `json:"labels,omitempty"`
	LatencyMillis int64             `json:"latencyMillis"`
	MaxLeases     int32             `json:"maxLeases"`
	FreeLeases    int32             `json:"freeLeases"`
	// ExitCountry is the country the proxy leaves from (status.exitCountry,
	// docs/geography.md), omitted when unknown.
	ExitCountry string `json:"exitCountry,omitempty"`
}

// List is the answer of the list calls.
type List[T any] struct {
	Items []T `json:"items"`
}

// Error is every error answer.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong; Field names the offending member or
// query parameter of a 400.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// Error codes of the API (docs/api.md): ErrorBody.Code.
const (
	CodeInvalid                = "Invalid"
	CodeRequestTooLarge        = "RequestTooLarge"
	CodeHeadersTooLarge        = "HeadersTooLarge"
	CodeRequestTimeout         = "RequestTimeout"
	CodeTooManyLeases          = "TooManyLeases"
	CodeDomainLimited          = "DomainLimited"
	CodeSiteBanning            = "SiteBanning"
	CodeUnauthorized           = "Unauthorized"
	CodeForbidden              = "Forbidden"
	CodeNotFound               = "NotFound"
	CodeMethodNotAllowed       = "MethodNotAllowed"
	CodeSuperseded             = "Superseded"
	CodeRevoked                = "Revoked"
	CodeNoneFree               = "NoneFree"
	CodeCoolingDown            = "CoolingDown"
	CodeRecovering             = "Recovering"
	CodeNotLeader              = "NotLeader"
	CodeUnavailable            = "Unavailable"
	CodeAuthUnavailable        = "AuthUnavailable"
	CodeCredentialsUnavailable = "CredentialsUnavailable"
	CodeGatewayOnly            = "GatewayOnly"
	CodeInternal               = "Internal"
)

// IsCountryCode says whether s is an ISO 3166-1 alpha-2 code in upper case
// (syntax only), as the country member is compared once upper-cased.
func IsCountryCode(s string) bool {
	return len(s) == 2 && 'A' <= s[0] && s[0] <= 'Z' && 'A' <= s[1] && s[1] <= 'Z'
}

// The headers by which a caller with the act-for permission (the gateway
// tier) makes a call as another user: that user's name, UID and groups (the
// group header repeated), as its own TokenReview found them. The call is
// then authorized, and its leases owned, as that user's
// (docs/decisions/0188-gateway-tier.md).
const (
	HeaderActForUser  = "Proxy-Operator-Act-For-User"
	HeaderActForUID   = "Proxy-Operator-Act-For-Uid"
	HeaderActForGroup = "Proxy-Operator-Act-For-Group"
)
