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
	Renew(ctx context.Context, id string, ttl time.Duration) (lease.Lease, error)
	Release(id string, outcome lease.Outcome, domain string) error
	// Get errors when the lease is no longer live (released through the
	// session call, revoked, expired).
	Get(id string) (lease.Lease, error)
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
func (l serverLeases) Renew(ctx context.Context, id string, ttl time.Duration) (lease.Lease, error) {
	return l.s.RenewLease(ctx, id, ttl)
}
func (l serverLeases) Release(id string, outcome lease.Outcome, domain string) error {
	return l.s.Store().Release(id, outcome, domain)
}
func (l serverLeases) Get(id string) (lease.Lease, error) { return l.s.Store().Get(id) }
func (l serverLeases) ForgetSession(scope, session string) {
	l.s.Store().ForgetSession(scope, session)
}
