// Package proxyaccess is how anyone reaches a Proxy: the address its status
// records and the credentials its Secret holds. The controller, the health
// engine, the lease feed and the local provider all read them here, so that
// they agree byte for byte (docs/decisions/0008-health-verdict-carries-address-was-measured.md compares addresses), a bad Secret
// reads as the same clear error everywhere, and no Secret reaches a proxy
// unless it is marked for proxies (ReadMarkedSecret).
package proxyaccess

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Address is host:port as the status, the health verdicts and the
// controller's messages write it.
func Address(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// StatusAddress is the host:port in p's status, where the controller records
// both Managed and External addresses; false while it has none.
func StatusAddress(p *crawlv1alpha1.Proxy) (string, bool) {
	if p.Status.IP == "" || p.Status.Port <= 0 {
		return "", false
	}
	return Address(p.Status.IP, p.Status.Port), true
}

// Scheme is how clients speak to the proxy itself: https only for an
// External endpoint that says so; a Managed instance serves plain HTTP.
func Scheme(p *crawlv1alpha1.Proxy) crawlv1alpha1.EndpointScheme {
	if p.Spec.Mode == crawlv1alpha1.ModeExternal && p.Spec.Endpoint != nil && p.Spec.Endpoint.Scheme == crawlv1alpha1.SchemeHTTPS {
		return crawlv1alpha1.SchemeHTTPS
	}
	return crawlv1alpha1.SchemeHTTP
}

// StatusURL is scheme://host:port of the proxy from its status; "" while it
// has no address.
func StatusURL(p *crawlv1alpha1.Proxy) string {
	addr, ok := StatusAddress(p)
	if !ok {
		return ""
	}
	return string(Scheme(p)) + "://" + addr
}

// Credentials are a proxy's basic-auth username and password. Secret: never
// log them.
type Credentials struct {
	Username string
	Password string
	// LeaseKeys is the instance's lease keys as its Secret holds them
	// (leasecred.SecretKey: base64url keys, the first signing), "" when
	// the Secret holds none: the instance's own, never handed to a holder.
	LeaseKeys string
	// LeaseBound: Password is a lease credential signed with the
	// instance's key, which admits only while its lease lives
	// (pkg/leasecred), not the static password.
	LeaseBound bool
}

// Fields that name a credentials Secret, as messages write them.
const (
	FieldAuthSecretRef                = "spec.auth.secretRef"
	FieldUpstreamCredentialsSecretRef = "spec.upstream.credentialsSecretRef"
	FieldSessionCredentialsSecretRef  = "spec.session.credentialsSecretRef"
)

// CredentialsError says the credentials Secret cannot serve as it is: it is
// missing, not marked for proxies, or a key is absent or unusable. Fixing
// the Secret heals it. Its message names the field (when known), the Secret
// and the key, never a value.
type CredentialsError struct {
	// Field is the spec field that named the Secret (FieldAuthSecretRef,
	// FieldUpstreamCredentialsSecretRef), "" for a generated Secret or when
	// the reader does not know it.
	Field string
	// Secret is the Secret's name, in the Proxy's namespace.
	Secret string
	// Key is the offending key, "" when the Secret itself is the problem.
	Key string
	// Problem says what is wrong, e.g. `must not contain ':'`.
	Problem string
	// NotMarked: the Secret lacks the crawl.proxyfleet.io/proxy-credentials
	// label (MarkedForProxies).
	NotMarked bool
}

func (e *CredentialsError) Error() string {
	what := fmt.Sprintf("credentials Secret %q", e.Secret)
	if e.Field != "" {
		what = fmt.Sprintf("%s: Secret %q", e.Field, e.Secret)
	}
	if e.Key == "" {
		return what + " " + e.Problem
	}
	return fmt.Sprintf("%s key %q %s", what, e.Key, e.Problem)
}

// IsCredentialsError reports whether err is (or wraps) a CredentialsError.
func IsCredentialsError(err error) bool {
	var ce *CredentialsError
	return errors.As(err, &ce)
}

// IsNotMarked reports whether err is (or wraps) a CredentialsError for a
// Secret that is not marked for proxies.
func IsNotMarked(err error) bool {
	var ce *CredentialsError
	return errors.As(err, &ce) && ce.NotMarked
}

// MarkedForProxies reports whether s says it is meant for proxies: the label
// crawl.proxyfleet.io/proxy-credentials=true, which the user puts on a
// Secret to let Proxies of its namespace use it, and the controller on every
// Secret it generates (docs/decisions/0230-credentials-secrets-opt-in-by-label.md).
func MarkedForProxies(s *corev1.Secret) bool {
	return s.Labels[crawlv1alpha1.ProxyCredentialsLabel] == crawlv1alpha1.ProxyCredentialsLabelValue
}

// notMarkedProblem tells the user exactly what to add, in the manifest's
// spelling and in kubectl's.
func notMarkedProblem(secret string) string {
	return fmt.Sprintf("is not marked for proxy use: add the label %s: %q to it (kubectl label secret %s %s=%s)",
		crawlv1alpha1.ProxyCredentialsLabel, crawlv1alpha1.ProxyCredentialsLabelValue,
		secret, crawlv1alpha1.ProxyCredentialsLabel, crawlv1alpha1.ProxyCredentialsLabelValue)
}

// CredentialsSecret names p's credentials Secret in its namespace: the
// user's spec.auth.secretRef when set; for a session on a shared instance
// (spec.session), the instance's Secret, from which the session's
// credentials derive (ReadProxyCredentials: no Secret per session); for a
// Managed Proxy without either, the Secret the controller generates
// (GeneratedCredentialsSecret), so that no Managed instance ever runs open;
// "" for an External Proxy without auth. This is the one rule every reader
// follows (controller, health engine, lease feed, providers), so that they
// all use the same credentials.
func CredentialsSecret(p *crawlv1alpha1.Proxy) string {
	switch {
	case p.Spec.Auth != nil:
		return p.Spec.Auth.SecretRef.Name
	case p.Spec.Session != nil:
		return p.Spec.Session.CredentialsSecretRef.Name
	case p.Spec.Mode != crawlv1alpha1.ModeExternal: // Managed is the default mode
		return GeneratedCredentialsSecret(p)
	}
	return ""
}

// SessionOf is the session id p's credentials carry in their username's
// "+session-<id>" term: a session on a shared instance's (spec.session),
// "" for any other Proxy.
func SessionOf(p *crawlv1alpha1.Proxy) string {
	if p.Spec.Session == nil {
		return ""
	}
	return SessionID(p.UID)
}

// SessionID is the session id of the Proxy with uid: 16 lowercase hex
// digits of a hash of it, which every proxy network's session parameter
// accepts, the same for the same Proxy. A new Proxy is a new session.
func SessionID(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:8])
}

// SessionUsername is the username of session on an instance whose username
// is user: user plus the session term the forward-proxy maps to an exit.
func SessionUsername(user, session string) string {
	if session == "" {
		return user
	}
	return user + "+session-" + session
}

// GeneratedCredentialsPrefix begins the name of every generated credentials
// Secret.
const GeneratedCredentialsPrefix = "proxy-auth-"

// GeneratedCredentialsSecret names the credentials Secret the controller
// generates for a Managed Proxy without spec.auth. It derives from the UID,
// not the name: it always fits a Secret name, never collides with a Secret
// the user named, and a Proxy deleted and created again under the same name
// never meets its predecessor's Secret while the garbage collector has yet
// to remove it.
func GeneratedCredentialsSecret(p *crawlv1alpha1.Proxy) string {
	return GeneratedCredentialsPrefix + string(p.UID)
}

// UsesGeneratedCredentials reports whether p's credentials are generated by
// the controller rather than named by the user.
func UsesGeneratedCredentials(p *crawlv1alpha1.Proxy) bool {
	return p.Spec.Auth == nil && p.Spec.Session == nil && p.Spec.Mode != crawlv1alpha1.ModeExternal
}

// SecretGetter reads a Secret of the Proxy's namespace by name (a lister, or
// a live read).
type SecretGetter func(name string) (*corev1.Secret, error)

// ReadMarkedSecret reads the Secret name (named by field, "" when the
// reader does not know it) with get, for a reader about to send what it
// holds to a proxy: the one gate every reader of proxy credentials goes
// through (ReadCredentials, and the controller's copy of an upstream
// account's password). The operator can read every Secret, but a Proxy's
// creator chooses where its credentials go (an External endpoint, an
// upstream super proxy, a cloud instance's user-data), so only a Secret
// marked for proxies (MarkedForProxies) is handed over. A missing or
// unmarked Secret is a *CredentialsError; any other failure to read is
// returned wrapped, and worth a retry.
func ReadMarkedSecret(field, name string, get SecretGetter) (*corev1.Secret, error) {
	s, err := get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &CredentialsError{Field: field, Secret: name, Problem: "not found"}
	case err != nil:
		return nil, fmt.Errorf("reading credentials Secret %q: %w", name, err)
	case !MarkedForProxies(s):
		return nil, &CredentialsError{Field: field, Secret: name, Problem: notMarkedProblem(name), NotMarked: true}
	}
	return s, nil
}

// ReadCredentials reads the credentials Secret named secret (as
// CredentialsSecret returns it) with get: nil, nil for "". It goes through
// ReadMarkedSecret; an unusable key is a *CredentialsError too. Its errors
// name the Secret but not the field: readers that hold the Proxy use
// ReadProxyCredentials.
func ReadCredentials(secret string, get SecretGetter) (*Credentials, error) {
	return readCredentials("", secret, get)
}

// ReadProxyCredentials reads p's credentials (CredentialsSecret) as
// ReadCredentials does, a session's username with its session term
// (Session); its errors also name the field that named the Secret
// (spec.auth.secretRef, spec.session.credentialsSecretRef), for conditions
// and events.
func ReadProxyCredentials(p *crawlv1alpha1.Proxy, get SecretGetter) (*Credentials, error) {
	field := ""
	switch {
	case p.Spec.Auth != nil:
		field = FieldAuthSecretRef
	case p.Spec.Session != nil:
		field = FieldSessionCredentialsSecretRef
	}
	creds, err := readCredentials(field, CredentialsSecret(p), get)
	if creds != nil {
		creds.Username = SessionUsername(creds.Username, SessionOf(p))
	}
	return creds, err
}

func readCredentials(field, secret string, get SecretGetter) (*Credentials, error) {
	if secret == "" {
		return nil, nil
	}
	s, err := ReadMarkedSecret(field, secret, get)
	if err != nil {
		return nil, err
	}
	creds := Credentials{
		Username:  string(s.Data[crawlv1alpha1.AuthUsernameKey]),
		Password:  string(s.Data[crawlv1alpha1.AuthPasswordKey]),
		LeaseKeys: string(s.Data[leasecred.SecretKey]),
	}
	if problem, key := checkCredentials(creds); problem != "" {
		return nil, &CredentialsError{Field: field, Secret: secret, Key: key, Problem: problem}
	}
	return &creds, nil
}

// checkCredentials says what makes creds unusable for HTTP basic auth and
// for forward-proxy's environment, and which key; "" when nothing does.
func checkCredentials(c Credentials) (problem, key string) {
	switch {
	case c.Username == "":
		return "is missing or empty", crawlv1alpha1.AuthUsernameKey
	case c.Password == "":
		return "is missing or empty", crawlv1alpha1.AuthPasswordKey
	case strings.Contains(c.Username, ":"):
		// Basic auth joins user:password; the server splits at the first ':'
		// (RFC 7617), so such a user could never log in.
		return "must not contain ':'", crawlv1alpha1.AuthUsernameKey
	case strings.ContainsRune(c.Username, 0):
		return "must not contain NUL bytes", crawlv1alpha1.AuthUsernameKey
	case strings.ContainsRune(c.Password, 0):
		return "must not contain NUL bytes", crawlv1alpha1.AuthPasswordKey
	}
	return "", ""
}
