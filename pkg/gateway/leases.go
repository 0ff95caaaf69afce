package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Leases is what the gateway needs of the lease API, for the user it
// authenticated: the lease API over HTTP (Remote), or a fake in unit tests.
type Leases interface {
	// Acquire holds while no lease API leader answers (Remote: up to its
	// LeaderWait), then errors with lease.ErrNotLeader.
	Acquire(ctx context.Context, user lease.User, req lease.AcquireRequest) (lease.Lease, *proxyaccess.Credentials, error)
	// Renew, Release and Get reach user's leases only.
	Renew(ctx context.Context, user lease.User, id string, ttl time.Duration) (lease.Lease, error)
	Release(ctx context.Context, user lease.User, id string, outcome lease.Outcome, domain string) error
	// Get errors with ErrUnknownLease, ErrRevoked or ErrSuperseded when the
	// lease is no longer live (released through the session call, revoked,
	// expired); any other error means it could not tell.
	Get(ctx context.Context, user lease.User, id string) (lease.Lease, error)
	// ReleaseSession releases the session's leases in scope with outcome
	// and drops the store's sticky choice for it, so that its next
	// connection gets another upstream.
	ReleaseSession(ctx context.Context, user lease.User, scope, session string, outcome lease.Outcome) error
}

// leaseGone reports whether err says the lease is over for good.
func leaseGone(err error) bool {
	return errors.Is(err, lease.ErrUnknownLease) || errors.Is(err, lease.ErrRevoked) || errors.Is(err, lease.ErrSuperseded)
}
