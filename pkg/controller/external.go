package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// reconcileExternal records an External proxy's endpoint and health. It never
// calls a provider and needs no finalizer: there is nothing to clean up.
func (c *Controller) reconcileExternal(ctx context.Context, p *crawlv1alpha1.Proxy) (time.Duration, error) {
	ep := p.Spec.Endpoint
	if ep == nil { // the CRD forbids this; guard against objects from before it
		c.setProvisioned(p, metav1.ConditionFalse, ReasonPermanentError, "spec.endpoint is required when spec.mode is External")
		return done, nil
	}
	if _, err := proxyaccess.ReadProxyCredentials(p, c.secrets.Secrets(p.Namespace).Get); err != nil {
		// The endpoint is the creator's choice: while its credentials cannot
		// be used (missing, or a Secret not marked for proxies), the status
		// holds no address, so the health engine probes nothing and the
		// lease API hands out nothing (docs/decisions/0230-credentials-secrets-opt-in-by-label.md).
		p.Status.IP, p.Status.Port, p.Status.ExitRanges = "", 0, nil
		clearHealth(p)
		c.refuseCredentials(p, err)
		c.stageAuthenticated(p)
		return done, err
	}
	p.Status.IP, p.Status.Port = ep.Host, ep.Port
	p.Status.ExitRanges = nil
	for _, r := range p.Spec.ExitRanges {
		p.Status.ExitRanges = append(p.Status.ExitRanges, string(r))
	}
	c.setProvisioned(p, metav1.ConditionTrue, ReasonExternalEndpoint, fmt.Sprintf("external proxy at %s", proxyaccess.Address(ep.Host, ep.Port)))
	c.stageAuthenticated(p)
	c.applyHealth(ctx, p)
	return done, nil
}
