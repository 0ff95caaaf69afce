// Package proxyaccess is how anyone reaches a Proxy: the address its status
// records and the credentials its Secret holds. The controller, the health
// engine, the lease feed and the local provider all read them here, so that
// they agree byte for byte (decision 8 compares addresses) and a bad Secret
// reads as the same clear error everywhere.
package proxyaccess

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
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
}

// CredentialsError says the credentials Secret cannot serve as it is: it is
// missing, or a key is absent or unusable. Fixing the Secret heals it. Its
// message names the Secret and the key, never a value.
type CredentialsError struct {
	// Secret is the Secret's name, in the Proxy's namespace.
	Secret string
	// Key is the offending key, "" when the Secret itself is missing.
	Key string
	// Problem says what is wrong, e.g. `must not contain ':'`.
	Problem string
}

func (e *CredentialsError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("credentials Secret %q %s", e.Secret, e.Problem)
	}
	return fmt.Sprintf("credentials Secret %q key %q %s", e.Secret, e.Key, e.Problem)
}

// IsCredentialsError reports whether err is (or wraps) a CredentialsError.
func IsCredentialsError(err error) bool {
	var ce *CredentialsError
	return errors.As(err, &ce)
}

// CredentialsSecret names p's credentials Secret in its namespace; "" when
// the proxy needs none.
func CredentialsSecret(p *crawlv1alpha1.Proxy) string {
	if p.Spec.Auth == nil {
		return ""
	}
	return p.Spec.Auth.SecretRef.Name
}

// SecretGetter reads a Secret of the Proxy's namespace by name (a lister, or
// a live read).
type SecretGetter func(name string) (*corev1.Secret, error)

// ReadCredentials reads the credentials Secret named secret (as
// CredentialsSecret returns it) with get: nil, nil for "". A missing Secret
// or an unusable key is a *CredentialsError; any other failure to read is
// returned wrapped, and worth a retry.
func ReadCredentials(secret string, get SecretGetter) (*Credentials, error) {
	if secret == "" {
		return nil, nil
	}
	s, err := get(secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &CredentialsError{Secret: secret, Problem: "not found"}
	case err != nil:
		return nil, fmt.Errorf("reading credentials Secret %q: %w", secret, err)
	}
	creds := Credentials{
		Username: string(s.Data[crawlv1alpha1.AuthUsernameKey]),
		Password: string(s.Data[crawlv1alpha1.AuthPasswordKey]),
	}
	if problem, key := checkCredentials(creds); problem != "" {
		return nil, &CredentialsError{Secret: secret, Key: key, Problem: problem}
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
