package provider

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// What providers differ in beyond making and observing instances is asked
// of them through the optional interfaces below; a provider implements only
// those it needs. Generic code (the Proxy controller, the pool controller,
// the health engine) never names a provider: it asks a Set, whose methods
// find a Proxy's provider by spec.provider and check one interface each,
// here and nowhere else (docs/decisions/0250-providers-own-their-quirks.md).
// A provider that implements none, a provider that is not enabled and an
// External Proxy get the answers of a provider that runs its own instances
// with the Proxy's credentials (kubernetes, local, gce, aws). Sweeper,
// for the orphan collector, is the same kind of hook.

// CredentialsRenderer is a provider whose Proxies' credentials are rendered
// from their spec, not generated at random: a proxy network's session uses
// the username its template renders and the account's password. The
// controller keeps the generated credentials Secret equal to what
// RenderCredentials returns, so that every reader (the health engine, the
// lease API, the gateway) reads them by the one rule
// (proxyaccess.CredentialsSecret).
type CredentialsRenderer interface {
	// CredentialsSources names the Secrets of p's namespace that
	// RenderCredentials reads, none when it renders nothing for p: a change
	// to one requeues p.
	CredentialsSources(p *crawlv1alpha1.Proxy) []string
	// RenderCredentials returns the credentials p's generated Secret must
	// hold; nil, nil when it renders nothing for p (the controller then
	// generates random ones). It reads Secrets only through readMarked,
	// which hands over a Secret only when it is marked for proxies; an
	// unmarked source (proxyaccess.IsNotMarked) makes the controller delete
	// its copy. Errors name the field and the Secret, never a value.
	RenderCredentials(p *crawlv1alpha1.Proxy, readMarked MarkedSecretReader) (*proxyaccess.Credentials, error)
}

// MarkedSecretReader reads the Secret name of the Proxy's namespace, which
// the spec field field names, only when it is marked for proxies
// (proxyaccess.ReadMarkedSecret).
type MarkedSecretReader func(field, name string) (*corev1.Secret, error)

// CredentialsCheckedElsewhere is a provider whose instances are not
// configured with a Proxy's credentials: a service the operator does not
// run checks them (a proxy network checks its account's). A credentials
// rotation then does not replace the instance, since the service takes the
// new ones from the next request on; and the health engine does not prove
// that the instance refuses a request without them, since it is not the
// operator's to close.
type CredentialsCheckedElsewhere interface {
	// RefusedCredentialsHint says where to look when the service refused
	// p's credentials, read from Secret secret; the health engine appends it
	// to the probe's message. It names fields and Secrets, never a value.
	RefusedCredentialsHint(p *crawlv1alpha1.Proxy, secret string) string
}

// Recycler is a provider whose instances serve well only up to an age: a
// proxy network moves a session to another IP when the session's lifetime
// ends. A pool replaces its members at that age (or at spec.maxAge when
// that is sooner), their leases drained first.
type Recycler interface {
	// RecycleAge is the age limit of an instance made from spec; false when
	// spec sets none.
	RecycleAge(spec *crawlv1alpha1.ProxySpec) (RecycleAge, bool)
}

// RecycleAge is a provider's age limit for an instance, and why, for the
// pool's events: "replaced <Why> (created <time>, spec.template.spec.<Setting>)".
type RecycleAge struct {
	Age time.Duration
	// Why completes "replaced": "before its session's lifetime ends".
	Why string
	// Setting is the field the age derives from, below spec, with its
	// value: "upstream.sessionLifetime 10m0s".
	Setting string
}

// CountryAsker is a provider whose instances were asked for an exit
// country (a proxy network's {country} in its username): a pool re-rolls a
// member whose measured exit country differs.
type CountryAsker interface {
	// AskedCountry is the ISO 3166-1 alpha-2 country (upper case) p's
	// instance was asked for, "" when none or not a country code.
	AskedCountry(p *crawlv1alpha1.Proxy) string
}

// SessionMaker is a provider whose Proxies are sessions on another Proxy,
// an instance with exit ranges (status.exitRanges): a pool with
// spec.membersPerInstance makes its members with it, and reads back which
// instance a member is on.
type SessionMaker interface {
	// SessionSpec is the spec of a member that is one session on instance,
	// made from the pool's template (which describes the instance).
	SessionSpec(instance *crawlv1alpha1.Proxy, template *crawlv1alpha1.ProxySpec) crawlv1alpha1.ProxySpec
	// SessionInstance names the instance p is a session of; "" if none.
	SessionInstance(p *crawlv1alpha1.Proxy) string
}

// Set is the enabled providers by name (spec.provider). Its methods are the
// one place where each optional interface above is checked.
type Set map[crawlv1alpha1.ProviderName]Provider

// CredentialsSources names the Secrets p's rendered credentials are read
// from (CredentialsRenderer); none when its provider renders none.
func (s Set) CredentialsSources(p *crawlv1alpha1.Proxy) []string {
	if r, ok := s[p.Spec.Provider].(CredentialsRenderer); ok {
		return r.CredentialsSources(p)
	}
	return nil
}

// RenderCredentials returns p's rendered credentials (CredentialsRenderer);
// nil, nil when its provider renders none.
func (s Set) RenderCredentials(p *crawlv1alpha1.Proxy, readMarked MarkedSecretReader) (*proxyaccess.Credentials, error) {
	if r, ok := s[p.Spec.Provider].(CredentialsRenderer); ok {
		return r.RenderCredentials(p, readMarked)
	}
	return nil, nil
}

// ConfiguresCredentials reports whether p's instance is configured with p's
// credentials, so that a rotation must replace it and it must refuse a
// request without them: true unless its provider is
// CredentialsCheckedElsewhere.
func (s Set) ConfiguresCredentials(p *crawlv1alpha1.Proxy) bool {
	_, elsewhere := s[p.Spec.Provider].(CredentialsCheckedElsewhere)
	return !elsewhere
}

// RefusedCredentialsHint says where to look when p's credentials, read from
// Secret secret, were refused (CredentialsCheckedElsewhere); "" for an
// instance configured with them, whose refusal says enough.
func (s Set) RefusedCredentialsHint(p *crawlv1alpha1.Proxy, secret string) string {
	if c, ok := s[p.Spec.Provider].(CredentialsCheckedElsewhere); ok {
		return c.RefusedCredentialsHint(p, secret)
	}
	return ""
}

// RecycleAge is the age limit of an instance made from spec (Recycler);
// false when its provider sets none.
func (s Set) RecycleAge(spec *crawlv1alpha1.ProxySpec) (RecycleAge, bool) {
	if r, ok := s[spec.Provider].(Recycler); ok {
		return r.RecycleAge(spec)
	}
	return RecycleAge{}, false
}

// AskedCountry is the exit country p's instance was asked for
// (CountryAsker); "" when its provider asks for none.
func (s Set) AskedCountry(p *crawlv1alpha1.Proxy) string {
	if a, ok := s[p.Spec.Provider].(CountryAsker); ok {
		return a.AskedCountry(p)
	}
	return ""
}

// SessionSpec is the spec of a member that is one session on instance
// (SessionMaker), from the first enabled provider that makes sessions;
// false when none is enabled.
func (s Set) SessionSpec(instance *crawlv1alpha1.Proxy, template *crawlv1alpha1.ProxySpec) (crawlv1alpha1.ProxySpec, bool) {
	for _, name := range slices.Sorted(maps.Keys(s)) {
		if m, ok := s[name].(SessionMaker); ok {
			return m.SessionSpec(instance, template), true
		}
	}
	return crawlv1alpha1.ProxySpec{}, false
}

// SessionInstance names the instance p is a session of (SessionMaker); ""
// when p is no session.
func (s Set) SessionInstance(p *crawlv1alpha1.Proxy) string {
	if m, ok := s[p.Spec.Provider].(SessionMaker); ok {
		return m.SessionInstance(p)
	}
	return ""
}
