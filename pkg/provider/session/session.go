// Package session is the provider of sessions on a shared instance: a
// Proxy whose forward-proxy leaves from exit ranges (docs/ipv6.md) serves
// many sessions, each from its own address of the range, picked by the
// session id in the username (<user>+session-<id>). A Proxy of this
// provider is one such session, as an upstream Proxy is one session of a
// proxy network (docs/decisions/0194-upstream-member-is-a-session.md): its
// "instance" is the shared instance's address plus the session id, so
// creating, observing and deleting it calls nothing. The id derives from
// the Proxy's UID, so a new Proxy is a new session and a new exit address,
// made without a new VM (docs/decisions/0354-pool-members-are-sessions-on-ranged-instances.md).
//
// Its credentials derive from the instance's, read from the instance's
// Secret by every reader (proxyaccess.ReadProxyCredentials: the instance's
// username plus the session; a lease's password signed with the instance's
// lease key, which binds the session, so only the session's own lease
// reaches its exit): no Secret is kept per session. The instance checks
// them (CredentialsCheckedElsewhere). A pool with spec.membersPerInstance
// makes its members through SessionMaker.
package session

import (
	"context"
	"errors"
	"fmt"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Provider implements provider.Provider for spec.provider: session.
type Provider struct {
	*upstream.Book // Get, Delete, ListByTag: as a network's sessions
}

// New returns the provider; it needs nothing.
func New() *Provider { return &Provider{upstream.NewBook("session", "the instance at")} }

var (
	_ provider.Provider                    = (*Provider)(nil)
	_ provider.CredentialsCheckedElsewhere = (*Provider)(nil)
	_ provider.SessionMaker                = (*Provider)(nil)
)

// Create returns the session: the instance's address with the session id
// of the Proxy's UID, the same for the same Proxy (idempotent by name).
func (p *Provider) Create(_ context.Context, req provider.CreateRequest) (provider.Instance, error) {
	spec := req.Proxy.Spec.Session
	if spec == nil {
		return provider.Instance{}, provider.Permanent(errors.New("session provider: spec.session is required"))
	}
	return p.Open(spec.Endpoint, req.Proxy.UID, req.SpecHash)
}

// Username is the session's username on an instance whose username is user.
func Username(user string, p *crawlv1alpha1.Proxy) string {
	return proxyaccess.SessionUsername(user, proxyaccess.SessionID(p.UID))
}

// RefusedCredentialsHint points at the instance, which checks the
// session's credentials: they derive from its own. The instance's own
// probe proves it refuses a request without them, so a session is not
// probed for that again (CredentialsCheckedElsewhere), and a new instance
// password is used from the next probe on, no new session.
func (*Provider) RefusedCredentialsHint(p *crawlv1alpha1.Proxy, secret string) string {
	instance, source := "", ""
	if p.Spec.Session != nil {
		instance, source = p.Spec.Session.Instance, p.Spec.Session.CredentialsSecretRef.Name
	}
	return fmt.Sprintf("the instance %s refused the session's username or password; check its credentials and lease-key in Secret %q (this session's derive from them: %q)", instance, source, secret)
}

// SessionSpec is the spec of a pool member that is one session on
// instance: the instance's address and credentials Secret, and the
// template's health check and lease limit (a member is probed and leased
// as every member is).
func (*Provider) SessionSpec(instance *crawlv1alpha1.Proxy, template *crawlv1alpha1.ProxySpec) crawlv1alpha1.ProxySpec {
	return crawlv1alpha1.ProxySpec{
		Mode:     crawlv1alpha1.ModeManaged,
		Provider: crawlv1alpha1.ProviderSession,
		Session: &crawlv1alpha1.SessionProvider{
			Instance:             instance.Name,
			Endpoint:             crawlv1alpha1.Endpoint{Host: instance.Status.IP, Port: instance.Status.Port, Scheme: crawlv1alpha1.SchemeHTTP},
			CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: proxyaccess.CredentialsSecret(instance)},
		},
		HealthCheck: *template.HealthCheck.DeepCopy(),
		MaxLeases:   template.MaxLeases,
	}
}

// SessionInstance names the instance p is a session of.
func (*Provider) SessionInstance(p *crawlv1alpha1.Proxy) string {
	if p.Spec.Session == nil {
		return ""
	}
	return p.Spec.Session.Instance
}
