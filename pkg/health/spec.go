package health

import (
	"crypto/x509"
	"net/url"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Defaults of spec.healthCheck, the same as the CRD's, for objects that did
// not go through the API server's defaulting (built in Go, say).
const (
	DefaultURL              = "https://www.gstatic.com/generate_204"
	DefaultExpectedStatus   = 204
	DefaultInterval         = 30 * time.Second
	DefaultTimeout          = 5 * time.Second
	DefaultSuccessThreshold = 1
	DefaultFailureThreshold = 3
)

// check is how one proxy is probed, resolved from its object. Its target
// has no credentials yet: the worker adds them from authSecret.
type check struct {
	target     Target
	interval   time.Duration
	thresholds thresholds
	// authSecret names the credentials Secret in the proxy's namespace, ""
	// for none (proxyaccess.CredentialsSecret).
	authSecret string
	// session is the session id of a session on a shared instance, whose
	// username carries it (proxyaccess.Session), "" for none.
	session string
	// signs: the probe authenticates with a credential it signs with the
	// Secret's lease key, when there is one: a session's exit and a ranged
	// instance admit nothing else (docs/decisions/0400-a-lease-is-a-key.md).
	signs bool
	// mustRefuseAnonymous: a Managed instance, which the operator starts with
	// credentials, must refuse a request without them (docs/decisions/0140-managed-instance-must-refuse-request-without.md).
	mustRefuseAnonymous bool
	// refusalHint, when the proxy refuses the credentials, says where to
	// look: what its provider says of a service that checks them
	// (provider.CredentialsCheckedElsewhere); "" for none.
	refusalHint string
}

// proxyAddress is the host:port the proxy is probed at, from its status
// (where the controller records both Managed and External addresses); false
// while it has none.
func proxyAddress(p *crawlv1alpha1.Proxy) (string, bool) { return proxyaccess.StatusAddress(p) }

// intervalOf is spec.healthCheck.interval, or its default.
func intervalOf(p *crawlv1alpha1.Proxy) time.Duration {
	if iv := p.Spec.HealthCheck.Interval; iv != nil && iv.Duration > 0 {
		return iv.Duration
	}
	return DefaultInterval
}

// checkFor resolves how to probe p at address. It is pure.
func checkFor(p *crawlv1alpha1.Proxy, address string, rootCAs *x509.CertPool, providers provider.Set) check {
	hc := p.Spec.HealthCheck
	c := check{
		target: Target{
			Proxy:          &url.URL{Scheme: string(proxyaccess.Scheme(p)), Host: address},
			URL:            orDefault(hc.URL, DefaultURL),
			ExpectedStatus: int(orDefault(hc.ExpectedStatus, DefaultExpectedStatus)),
			Timeout:        DefaultTimeout,
			RootCAs:        rootCAs,
		},
		interval: intervalOf(p),
		thresholds: thresholds{
			success: int(orDefault(hc.SuccessThreshold, DefaultSuccessThreshold)),
			failure: int(orDefault(hc.FailureThreshold, DefaultFailureThreshold)),
		},
	}
	if hc.Timeout != nil && hc.Timeout.Duration > 0 {
		c.target.Timeout = hc.Timeout.Duration
	}
	if hc.TLS != nil {
		c.target.InsecureSkipVerify = hc.TLS.InsecureSkipVerify
		c.target.ServerName = hc.TLS.ServerName
	}
	c.target.ExitIPFromBody = hc.ExitIPFromBody
	if info := hc.ExitInfo; info != nil {
		c.target.ExitInfo = &ExitInfoFields{IPField: info.IPField, CountryField: info.CountryField}
	}
	c.authSecret = proxyaccess.CredentialsSecret(p)
	if c.authSecret == "" {
		return c
	}
	c.session = proxyaccess.SessionOf(p)
	c.signs = c.session != "" || len(p.Status.ExitRanges) > 0
	// An instance not configured with the credentials (a proxy network's
	// super proxy) is not ours to prove closed.
	c.mustRefuseAnonymous = p.Spec.Mode != crawlv1alpha1.ModeExternal && providers.ConfiguresCredentials(p)
	c.refusalHint = providers.RefusedCredentialsHint(p, c.authSecret)
	return c
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
