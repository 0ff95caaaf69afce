package client

import (
	"context"
	"net/http"
	"net/url"
)

// ReleaseSession releases every lease of a gateway session with an outcome
// (DELETE /v1/sessions/{session}); the session's next connection through the
// gateway gets another proxy. namespace is the session's ns- term ("" when
// the username had none). OutcomeBanned cools the proxy down for domain
// ("" : the domain the lease was acquired with, the first target host).
func (c *Client) ReleaseSession(ctx context.Context, namespace, session string, outcome Outcome, domain string) error {
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	if outcome != "" {
		q.Set("outcome", string(outcome))
	}
	if domain != "" {
		q.Set("domain", domain)
	}
	return c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(session), q, nil, http.StatusNoContent, nil)
}
