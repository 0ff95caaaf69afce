package gateway

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

// holding is one lease the gateway holds: a session's (kept between
// connections) or a rotating connection's (released at its close).
type holding struct {
	proxy cache.ObjectName
	// owner is the identity the lease was acquired for (lease.User.Identity).
	owner string
	// upstream is the proxy's URL with its credentials in User: never
	// logged, never shown to clients (use proxy to name it).
	upstream *url.URL

	mu        sync.Mutex
	id        string // changes at each renewal
	expiresAt time.Time
	ttl       time.Duration
	// ended: released or found gone; nothing more to do with the lease.
	ended bool
}

func newHolding(l lease.Lease, creds *lease.Credentials) (*holding, error) {
	u, err := url.Parse(l.Proxy.URL)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		u.User = url.UserPassword(creds.Username, creds.Password)
	}
	return &holding{proxy: l.Proxy.Key, owner: l.Owner, upstream: u, id: l.ID, expiresAt: l.ExpiresAt, ttl: l.TTL}, nil
}

// live reports whether the store still holds the lease for us.
func (h *holding) live(leases Leases) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	if _, err := leases.Get(h.owner, h.id); err != nil {
		h.ended = true
		return false
	}
	return true
}

// release gives the lease back once; later calls do nothing.
func (h *holding) release(leases Leases, outcome lease.Outcome, logger klog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	if err := leases.Release(h.owner, h.id, outcome, ""); err != nil && !errors.Is(err, lease.ErrUnknownLease) && !errors.Is(err, lease.ErrNotLeader) {
		logger.Error(err, "Releasing a gateway lease", "proxy", h.proxy, "outcome", outcome)
	}
}

// renewIfDue renews when less than half the TTL is left. It reports false
// when the lease is gone (revoked, released through the session call,
// expired), so that the next connection acquires another.
func (h *holding) renewIfDue(ctx context.Context, leases Leases, now time.Time, logger klog.Logger) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	if h.expiresAt.Sub(now) > h.ttl/2 {
		return true
	}
	l, err := leases.Renew(ctx, h.owner, h.id, h.ttl)
	switch {
	case err == nil:
		h.id, h.expiresAt = l.ID, l.ExpiresAt
		return true
	case errors.Is(err, lease.ErrUnknownLease), errors.Is(err, lease.ErrRevoked), errors.Is(err, lease.ErrSuperseded), errors.Is(err, lease.ErrNotLeader):
		logger.V(3).Info("Gateway lease gone", "proxy", h.proxy, "reason", err.Error())
		h.ended = true
		return false
	default:
		// Try again at the next tick; the lease is still live until it expires.
		logger.Error(err, "Renewing a gateway lease", "proxy", h.proxy)
		return true
	}
}

// sessionKey names a session: sessions are per namespace term (as the lease
// store's are) and per pool, so the same id in two pools is two sessions.
type sessionKey struct {
	namespace, pool, id string
}

// session is a sticky session's state: the lease it holds, if any, and how
// many connections use it.
type session struct {
	// acquiring serializes lookups, so that two first connections of one
	// session share one lease instead of taking two proxies.
	acquiring sync.Mutex

	mu       sync.Mutex
	held     *holding
	active   int
	lastUsed time.Time
}
