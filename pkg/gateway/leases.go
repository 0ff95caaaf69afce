package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

// Leases is what the gateway needs of the lease API, for the user it
// authenticated: *lease.Server in the leader's process (FromServer), the
// lease API over HTTP in the gateway tier (Remote), a fake in unit tests.
// One relay code path either way.
type Leases interface {
	// Leading reports whether new connections can be served now; false
	// answers them 503 not_leader at once. Remote holds them instead.
	Leading() bool
	Acquire(ctx context.Context, user lease.User, req lease.AcquireRequest) (lease.Lease, *lease.Credentials, error)
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

// FromServer adapts the lease API's server, in the leader's process.
func FromServer(s *lease.Server) Leases { return serverLeases{s} }

type serverLeases struct{ s *lease.Server }

func (l serverLeases) Leading() bool { return l.s.Leading() }
func (l serverLeases) Acquire(ctx context.Context, user lease.User, req lease.AcquireRequest) (lease.Lease, *lease.Credentials, error) {
	req.Owner = user.Identity()
	return l.s.AcquireWithCredentials(ctx, req)
}
func (l serverLeases) Renew(ctx context.Context, user lease.User, id string, ttl time.Duration) (lease.Lease, error) {
	return l.s.RenewLease(ctx, user.Identity(), id, ttl)
}
func (l serverLeases) Release(_ context.Context, user lease.User, id string, outcome lease.Outcome, domain string) error {
	return l.s.Store().ReleaseAs(user.Identity(), id, outcome, domain)
}
func (l serverLeases) Get(_ context.Context, user lease.User, id string) (lease.Lease, error) {
	return l.s.Store().GetAs(user.Identity(), id)
}
func (l serverLeases) ReleaseSession(_ context.Context, user lease.User, scope, session string, outcome lease.Outcome) error {
	store := l.s.Store()
	var errs []error
	for _, held := range store.SessionLeases(user.Identity(), scope, session) {
		if err := store.ReleaseAs(user.Identity(), held.ID, outcome, ""); err != nil && !errors.Is(err, lease.ErrUnknownLease) {
			errs = append(errs, err)
		}
	}
	store.ForgetSession(user.Identity(), scope, session)
	return errors.Join(errs...)
}

// leaseGone reports whether err says the lease is over for good.
func leaseGone(err error) bool {
	return errors.Is(err, lease.ErrUnknownLease) || errors.Is(err, lease.ErrRevoked) || errors.Is(err, lease.ErrSuperseded)
}
