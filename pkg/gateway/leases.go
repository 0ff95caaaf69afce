package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Leases is what the gateway needs of the lease API, for the user it
// authenticated: the lease API over HTTP (Remote), or a fake in unit tests.
type Leases interface {
	// Acquire holds while no lease API leader answers (Remote: up to its
	// LeaderWait), then errors with store.ErrNotLeader.
	Acquire(ctx context.Context, user auth.User, req store.AcquireRequest) (store.Lease, *proxyaccess.Credentials, error)
	// Renew, Release and Get reach user's leases only. Renew reports what
	// happened on the lease since the last report, Release the bytes
	// transferred through the proxy since then (0: none), for its pool's
	// usage. Renew returns the renewal's credentials when they are the
	// lease's own (a proxy that checks lease credentials), else nil.
	Renew(ctx context.Context, user auth.User, id string, ttl time.Duration, report store.Report) (store.Lease, *proxyaccess.Credentials, error)
	Release(ctx context.Context, user auth.User, id string, outcome store.Outcome, domain string, transferred int64) error
	// Get errors with ErrUnknownLease, ErrRevoked or ErrSuperseded when the
	// lease is no longer live (released through the session call, revoked,
	// expired); any other error means it could not tell.
	Get(ctx context.Context, user auth.User, id string) (store.Lease, error)
	// ReleaseSession releases the session's leases in scope with outcome
	// (banned: for domain) and drops the store's sticky choice for it, so
	// that its next connection gets another upstream.
	ReleaseSession(ctx context.Context, user auth.User, scope, session string, outcome store.Outcome, domain string) error
}

// leaseGone reports whether err says the lease is over for good.
func leaseGone(err error) bool {
	return errors.Is(err, store.ErrUnknownLease) || errors.Is(err, store.ErrRevoked) || errors.Is(err, store.ErrSuperseded)
}
