package gateway

import (
	"context"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

// Leases is what the gateway needs of the lease API: *lease.Server through
// FromServer in the operator, a fake in unit tests.
type Leases interface {
	// Leading reports whether this replica grants leases.
	Leading() bool
	Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Lease, *lease.Credentials, error)
	// Renew, Release and Get reach the leases of owner (the identity that
	// acquired them, AcquireRequest.Owner) only.
	Renew(ctx context.Context, owner, id string, ttl time.Duration) (lease.Lease, error)
	Release(owner, id string, outcome lease.Outcome, domain string) error
	// Get errors when the lease is no longer live (released through the
	// session call, revoked, expired).
	Get(owner, id string) (lease.Lease, error)
	// ForgetSession drops the store's sticky choice for a session.
	ForgetSession(scope, session string)
}

// FromServer adapts the lease API's server.
func FromServer(s *lease.Server) Leases { return serverLeases{s} }

type serverLeases struct{ s *lease.Server }

func (l serverLeases) Leading() bool { return l.s.Leading() }
func (l serverLeases) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Lease, *lease.Credentials, error) {
	return l.s.AcquireWithCredentials(ctx, req)
}
func (l serverLeases) Renew(ctx context.Context, owner, id string, ttl time.Duration) (lease.Lease, error) {
	return l.s.RenewLease(ctx, owner, id, ttl)
}
func (l serverLeases) Release(owner, id string, outcome lease.Outcome, domain string) error {
	return l.s.Store().ReleaseAs(owner, id, outcome, domain)
}
func (l serverLeases) Get(owner, id string) (lease.Lease, error) {
	return l.s.Store().GetAs(owner, id)
}
func (l serverLeases) ForgetSession(scope, session string) {
	l.s.Store().ForgetSession(scope, session)
}
