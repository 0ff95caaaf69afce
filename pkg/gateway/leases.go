package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Leases is what the gateway needs of the lease API, for the user it
// authenticated, in the lease client's terms: the lease API over HTTP
// (Remote), or a fake in unit tests. Its errors are the client's: an
// *client.Error for an answer of the API, client.ErrNotLeader when no
// leader answered.
type Leases interface {
	// Acquire holds while no lease API leader answers (Remote: up to its
	// LeaderWait), then errors with client.ErrNotLeader.
	Acquire(ctx context.Context, user auth.User, req client.AcquireRequest) (client.Lease, *proxyaccess.Credentials, error)
	// Renew, Release and Get reach user's leases only. Renew reports what
	// happened on the lease since the last report, Release the bytes
	// transferred through the proxy since then (0: none), for its pool's
	// usage. Renew returns the renewal's credentials when they are the
	// lease's own (a proxy that checks lease credentials), else nil.
	Renew(ctx context.Context, user auth.User, id string, ttl time.Duration, report client.Report) (client.Lease, *proxyaccess.Credentials, error)
	Release(ctx context.Context, user auth.User, id string, outcome client.Outcome, domain string, transferred int64) error
	// Get errors with client.ErrLeaseLost when the lease is no longer live
	// (released through the session call, revoked, expired, superseded);
	// any other error means it could not tell.
	Get(ctx context.Context, user auth.User, id string) (client.Lease, error)
	// ReleaseSession releases the session's leases in scope with outcome
	// (banned: for domain) and drops the store's sticky choice for it, so
	// that its next connection gets another upstream.
	ReleaseSession(ctx context.Context, user auth.User, scope, session string, outcome client.Outcome, domain string) error
}

// leaseGone reports whether err says the lease is over for good.
func leaseGone(err error) bool {
	return errors.Is(err, client.ErrLeaseLost)
}

// apiError is the lease API's answer in err, nil when err is none.
func apiError(err error) *client.Error {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return nil
}

// hasCode reports whether err is the lease API's answer with code (wire.Code…).
func hasCode(err error, code string) bool {
	apiErr := apiError(err)
	return apiErr != nil && apiErr.Code == code
}
