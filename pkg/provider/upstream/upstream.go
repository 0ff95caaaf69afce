// Package upstream is the provider of sessions of a commercial proxy
// network (docs/upstreams.md). Such a network sells one super proxy
// address; the username picks the exit IP behind it, and a session id in
// the username keeps one IP for a while. A Proxy of this provider is one
// session: its "instance" is the super proxy's address plus the session
// id, so creating, observing and deleting it calls nothing, and nothing
// can leak. The session id derives from the Proxy's UID, so a new Proxy
// (a pool's new member) is a new session and a new IP
// (docs/decisions/0194-upstream-member-is-a-session.md).
//
// What sets a session apart from an instance the operator runs, it says
// through pkg/provider's optional hooks: its credentials are rendered from
// the spec (CredentialsRenderer), the network checks them
// (CredentialsCheckedElsewhere), and a pool replaces it before the network
// moves it to another IP (Recycler).
package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// DefaultSessionLifetime is spec.upstream.sessionLifetime's default: what
// most networks keep a sticky session for.
const DefaultSessionLifetime = 10 * time.Minute

// Provider implements provider.Provider for spec.provider: upstream.
type Provider struct {
	*Book // Get, Delete, ListByTag
}

// New returns the provider; it needs nothing.
func New() *Provider { return &Provider{NewBook("upstream", "the super proxy")} }

var (
	_ provider.Provider                    = (*Provider)(nil)
	_ provider.CredentialsRenderer         = (*Provider)(nil)
	_ provider.CredentialsCheckedElsewhere = (*Provider)(nil)
	_ provider.Recycler                    = (*Provider)(nil)
)

// Create returns the session's instance: the super proxy with the session
// id of the Proxy's UID. The same Proxy always gets the same ID, so Create
// is idempotent by name as the contract asks.
func (p *Provider) Create(_ context.Context, req provider.CreateRequest) (provider.Instance, error) {
	spec := req.Proxy.Spec.Upstream
	if spec == nil {
		return provider.Instance{}, provider.Permanent(errors.New("upstream provider: spec.upstream is required"))
	}
	return p.Open(spec.Endpoint, req.Proxy.UID, req.SpecHash)
}

// SessionID is the session id of the Proxy with uid: 16 lowercase hex
// digits, which every network's session parameter accepts.
func SessionID(uid types.UID) string { return proxyaccess.SessionID(uid) }

// Username renders spec's username template for the Proxy with uid.
func Username(spec *crawlv1alpha1.UpstreamProvider, uid types.UID) string {
	return strings.NewReplacer(
		"{session}", SessionID(uid),
		"{country}", Country(spec, uid),
		"{lifetimeMinutes}", strconv.Itoa(int(SessionLifetime(spec)/time.Minute)),
	).Replace(spec.UsernameTemplate)
}

// Country is the member's country: one of spec.countries chosen from its
// UID, so that a pool spreads over them; "" without countries.
func Country(spec *crawlv1alpha1.UpstreamProvider, uid types.UID) string {
	if len(spec.Countries) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte("country/" + uid))
	return spec.Countries[binary.BigEndian.Uint64(sum[:8])%uint64(len(spec.Countries))]
}

// AskedCountry is the ISO 3166-1 alpha-2 country (upper case) that the
// Proxy's username asks the network for, "" when it asks for none or for
// something that is not a two-letter code (a network's own region name):
// only then can a measured status.exitCountry prove the network wrong.
// "uk", which networks accept for Great Britain, is GB.
func (*Provider) AskedCountry(p *crawlv1alpha1.Proxy) string {
	spec := p.Spec.Upstream
	if spec == nil || !strings.Contains(spec.UsernameTemplate, "{country}") {
		return ""
	}
	c := strings.ToUpper(Country(spec, p.UID))
	if c == "UK" {
		return "GB"
	}
	if len(c) != 2 || c[0] < 'A' || c[0] > 'Z' || c[1] < 'A' || c[1] > 'Z' {
		return ""
	}
	return c
}

// SessionLifetime is spec.sessionLifetime or its default.
func SessionLifetime(spec *crawlv1alpha1.UpstreamProvider) time.Duration {
	if spec.SessionLifetime != nil && spec.SessionLifetime.Duration > 0 {
		return spec.SessionLifetime.Duration
	}
	return DefaultSessionLifetime
}

// RecycleAge is the age at which a pool replaces a member made from spec:
// four fifths of the session's lifetime, so that its leases drain before the
// network moves the session to another IP.
func (*Provider) RecycleAge(spec *crawlv1alpha1.ProxySpec) (provider.RecycleAge, bool) {
	if spec.Upstream == nil {
		return provider.RecycleAge{}, false
	}
	lifetime := SessionLifetime(spec.Upstream)
	return provider.RecycleAge{
		Age:     lifetime * 4 / 5,
		Why:     "before its session's lifetime ends",
		Setting: fmt.Sprintf("upstream.sessionLifetime %s", lifetime),
	}, true
}

// A session keeps its credentials in its generated Secret like any Managed
// Proxy, so that the health engine, the lease API and the gateway read them
// by the one rule: the username rendered from spec.upstream.usernameTemplate
// for its session, and the account's password copied from
// spec.upstream.credentialsSecretRef. The controller keeps the copy current
// when either changes.

// CredentialsSources is the account's Secret, which the generated Secret
// copies the password of.
func (*Provider) CredentialsSources(p *crawlv1alpha1.Proxy) []string {
	if p.Spec.Upstream == nil {
		return nil
	}
	return []string{p.Spec.Upstream.CredentialsSecretRef.Name}
}

// RenderCredentials is the session's username and the account's password.
// The account's Secret goes through readMarked, the one gate every
// credentials reader goes through: the password is copied only from a
// Secret marked for proxies.
func (*Provider) RenderCredentials(p *crawlv1alpha1.Proxy, readMarked provider.MarkedSecretReader) (*proxyaccess.Credentials, error) {
	if p.Spec.Upstream == nil {
		return nil, nil
	}
	name := p.Spec.Upstream.CredentialsSecretRef.Name
	secret, err := readMarked(proxyaccess.FieldUpstreamCredentialsSecretRef, name)
	if err != nil {
		return nil, err
	}
	password := secret.Data[crawlv1alpha1.AuthPasswordKey]
	if len(password) == 0 {
		return nil, &proxyaccess.CredentialsError{Field: proxyaccess.FieldUpstreamCredentialsSecretRef, Secret: name, Key: crawlv1alpha1.AuthPasswordKey, Problem: "is missing or empty"}
	}
	return &proxyaccess.Credentials{Username: Username(p.Spec.Upstream, p.UID), Password: string(password)}, nil
}

// RefusedCredentialsHint points at what the network checks: the rendered
// username and the account's password. A session is not configured with
// them (CredentialsCheckedElsewhere): a new password is used from the next
// probe and lease on, and the super proxy is not the operator's to prove
// closed.
func (*Provider) RefusedCredentialsHint(_ *crawlv1alpha1.Proxy, secret string) string {
	return fmt.Sprintf("the proxy network refused the username or the password; check spec.upstream.usernameTemplate and the password in spec.upstream.credentialsSecretRef (copied into Secret %q)", secret)
}
