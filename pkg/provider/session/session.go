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
// Its credentials are rendered from the instance's (CredentialsRenderer):
// the instance's username plus the session, the instance's password; the
// instance checks them (CredentialsCheckedElsewhere). A pool with
// spec.membersPerInstance makes its members through SessionMaker.
package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// deletedFor is how long Get reports a deleted session gone (as upstream's).
const deletedFor = time.Hour

// Provider implements provider.Provider for spec.provider: session.
type Provider struct {
	clock func() time.Time

	mu      sync.Mutex
	deleted map[string]time.Time // session ID -> when Delete was called
}

// New returns the provider; it needs nothing.
func New() *Provider { return &Provider{clock: time.Now, deleted: map[string]time.Time{}} }

var (
	_ provider.Provider                    = (*Provider)(nil)
	_ provider.CredentialsRenderer         = (*Provider)(nil)
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
	id := net.JoinHostPort(spec.Endpoint.Host, strconv.Itoa(int(spec.Endpoint.Port))) + "/" + upstream.SessionID(req.Proxy.UID)
	inst, err := instanceOf(id)
	inst.SpecHash = req.SpecHash
	p.mu.Lock()
	delete(p.deleted, id) // a replace deletes and creates the same session
	p.mu.Unlock()
	return inst, err
}

// Get parses the ID back: a session is there until Delete. Whether the
// instance serves it, the probe through it tells.
func (p *Provider) Get(_ context.Context, id string) (provider.Instance, error) {
	p.mu.Lock()
	_, gone := p.deleted[id]
	p.mu.Unlock()
	if gone {
		return provider.Instance{}, provider.ErrNotFound
	}
	return instanceOf(id)
}

// Delete has nothing to call: the instance keeps no state per session.
func (p *Provider) Delete(_ context.Context, id string) error {
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for old, at := range p.deleted {
		if now.Sub(at) > deletedFor {
			delete(p.deleted, old)
		}
	}
	p.deleted[id] = now
	return nil
}

// ListByTag lists nothing: there is nothing to orphan.
func (*Provider) ListByTag(context.Context, string, string) ([]provider.Instance, error) {
	return nil, nil
}

func instanceOf(id string) (provider.Instance, error) {
	addr, session, ok := strings.Cut(id, "/")
	host, portText, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if !ok || err != nil || perr != nil || session == "" || port == 0 {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("session provider: malformed instance ID %q (want host:port/session)", id))
	}
	return provider.Instance{
		ID: id, State: provider.StateRunning, IP: host, Port: int32(port),
		Message: "session " + session + " of the instance at " + addr,
	}, nil
}

// Username is the session's username on an instance whose username is user.
func Username(user string, p *crawlv1alpha1.Proxy) string {
	return user + "+session-" + upstream.SessionID(p.UID)
}

// CredentialsSources is the instance's credentials Secret.
func (*Provider) CredentialsSources(p *crawlv1alpha1.Proxy) []string {
	if p.Spec.Session == nil {
		return nil
	}
	return []string{p.Spec.Session.CredentialsSecretRef.Name}
}

// RenderCredentials is the instance's username with the session, and the
// instance's password, read through readMarked like every credential.
func (*Provider) RenderCredentials(p *crawlv1alpha1.Proxy, readMarked provider.MarkedSecretReader) (*proxyaccess.Credentials, error) {
	if p.Spec.Session == nil {
		return nil, nil
	}
	name := p.Spec.Session.CredentialsSecretRef.Name
	secret, err := readMarked(proxyaccess.FieldSessionCredentialsSecretRef, name)
	if err != nil {
		return nil, err
	}
	for _, key := range []string{crawlv1alpha1.AuthUsernameKey, crawlv1alpha1.AuthPasswordKey} {
		if len(secret.Data[key]) == 0 {
			return nil, &proxyaccess.CredentialsError{Field: proxyaccess.FieldSessionCredentialsSecretRef, Secret: name, Key: key, Problem: "is missing or empty"}
		}
	}
	return &proxyaccess.Credentials{
		Username: Username(string(secret.Data[crawlv1alpha1.AuthUsernameKey]), p),
		Password: string(secret.Data[crawlv1alpha1.AuthPasswordKey]),
	}, nil
}

// RefusedCredentialsHint points at the instance, which checks the
// session's credentials: they are its own with the session added. The
// instance's own probe proves it refuses a request without them, so a
// session is not probed for that again (CredentialsCheckedElsewhere), and
// a new instance password is used from the next probe on, no new session.
func (*Provider) RefusedCredentialsHint(p *crawlv1alpha1.Proxy, secret string) string {
	instance, source := "", ""
	if p.Spec.Session != nil {
		instance, source = p.Spec.Session.Instance, p.Spec.Session.CredentialsSecretRef.Name
	}
	return fmt.Sprintf("the instance %s refused the session's username or password; check its credentials in Secret %q (copied into Secret %q)", instance, source, secret)
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
