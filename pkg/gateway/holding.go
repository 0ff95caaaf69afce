package gateway

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// holding is one lease the gateway holds: a session's (kept between
// connections, and possibly shared with other gateway replicas carrying the
// same session) or a rotating connection's (released at its close).
type holding struct {
	proxy cache.ObjectName
	// pool is the proxy's ProxyPool ("" if none), for the bytes metric.
	pool string
	// user is who the lease was acquired for.
	user auth.User
	// upstreamURL is the proxy's URL with its credentials in User: never
	// logged, never shown to clients (use proxy to name it). A renewal of
	// a lease on a proxy that checks lease credentials replaces it with
	// one carrying the fresh credentials (upstream reads it).
	upstreamURL atomic.Pointer[url.URL]

	// transferred is the bytes moved through the upstream since the last
	// report; each renewal and the release report them to the leader, for
	// the pool's status.usage.transferredGiB.
	transferred atomic.Int64
	// okRequests went well on a session's lease since the last report:
	// reported with the renewals, so that a session counts each request
	// (a rotating lease counts its one with its release).
	okRequests atomic.Int64

	mu        sync.Mutex
	id        string // changes at each renewal
	expiresAt time.Time
	ttl       time.Duration
	// ended: released or found gone; nothing more to do with the lease.
	ended bool
}

func newHolding(user auth.User, l client.Lease, creds *proxyaccess.Credentials) (*holding, error) {
	u, err := url.Parse(l.Proxy.URL)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		u.User = url.UserPassword(creds.Username, creds.Password)
	}
	h := &holding{proxy: cache.ObjectName{Namespace: l.Proxy.Namespace, Name: l.Proxy.Name}, pool: l.Proxy.Pool, user: user, id: l.ID, expiresAt: l.ExpiresAt, ttl: l.TTL}
	h.upstreamURL.Store(u)
	return h, nil
}

// upstream is the proxy's URL with its latest credentials: new tunnels and
// requests use them; those open already live as long as the lease (the
// operator tells the proxy of each renewal).
func (h *holding) upstream() *url.URL { return h.upstreamURL.Load() }

// refresh takes a renewal's credentials, when they are the lease's own
// (signed for its new end); a proxy's own credentials do not change.
func (h *holding) refresh(creds *proxyaccess.Credentials) {
	if creds == nil || !creds.LeaseBound {
		return
	}
	u := *h.upstream()
	u.User = url.UserPassword(creds.Username, creds.Password)
	h.upstreamURL.Store(&u)
}

// detector judges the responses through the holding.

// live reports whether the lease is still ours. When the store cannot tell
// (no leader during a failover) it is used as long as it has not expired.
func (h *holding) live(ctx context.Context, leases Leases, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	if _, err := leases.Get(ctx, h.user, h.id); leaseGone(err) || (err != nil && !now.Before(h.expiresAt)) {
		h.ended = true
		return false
	}
	return true
}

// release gives the lease back once (with the domain of a ban); later
// calls do nothing.
func (h *holding) release(ctx context.Context, leases Leases, outcome client.Outcome, domain string, logger klog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	if err := leases.Release(ctx, h.user, h.id, outcome, domain, h.transferred.Swap(0)); err != nil && !leaseGone(err) && !errors.Is(err, client.ErrNotLeader) {
		logger.Error(err, "Releasing a gateway lease", "proxy", h.proxy, "outcome", outcome)
	}
}

// drop stops renewing without releasing: a session's lease may be shared
// with other replicas, so it lapses at its expiry unless one of them renews.
// What happened since the last renewal (requests, bytes) is reported
// first, with one more renewal, so that the pool's usage loses none of it.
func (h *holding) drop(ctx context.Context, leases Leases, logger klog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	if r := h.takeReport(); r != (client.Report{}) {
		if _, _, err := leases.Renew(ctx, h.user, h.id, h.ttl, r); err != nil && !leaseGone(err) {
			logger.V(2).Info("Could not report a dropped lease's usage", "proxy", h.proxy, "okRequests", r.OKRequests, "bytes", r.TransferredBytes, "err", err.Error())
		}
	}
}

// takeReport is what happened on the lease since the last report.
func (h *holding) takeReport() client.Report {
	return client.Report{OKRequests: h.okRequests.Swap(0), TransferredBytes: h.transferred.Swap(0)}
}

// putBack keeps an unsent report for the next one.
func (h *holding) putBack(r client.Report) {
	h.okRequests.Add(r.OKRequests)
	h.transferred.Add(r.TransferredBytes)
}

// renewIfDue renews when less than half the TTL is left, and takes the
// renewal's fresh credentials for the tunnels and requests it opens next.
// It reports false when the lease is gone (revoked, released through the
// session call, expired), so that the next connection acquires another.
// Without a leader it tries again at the next tick until the lease
// expires: a failover must not end a tunnel.
func (h *holding) renewIfDue(ctx context.Context, leases Leases, now time.Time, logger klog.Logger) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	if h.expiresAt.Sub(now) > h.ttl/2 {
		return true
	}
	report := h.takeReport()
	l, creds, err := leases.Renew(ctx, h.user, h.id, h.ttl, report)
	if err != nil && !leaseGone(err) {
		h.putBack(report) // not counted: report it next time
	}
	switch {
	case err == nil:
		h.id, h.expiresAt = l.ID, l.ExpiresAt
		h.refresh(creds)
		return true
	case leaseGone(err), !now.Before(h.expiresAt):
		logger.V(3).Info("Gateway lease gone", "proxy", h.proxy, "reason", err.Error())
		h.ended = true
		return false
	case errors.Is(err, client.ErrNotLeader):
		logger.V(2).Info("No lease API leader to renew with; trying again", "proxy", h.proxy, "expiresAt", h.expiresAt)
		return true
	default:
		// Try again at the next tick; the lease is still live until it expires.
		logger.Error(err, "Renewing a gateway lease", "proxy", h.proxy)
		return true
	}
}

// sessionKey names a session: sessions are per caller (the lease API's
// owner identity, User.Identity), per namespace term (as the lease store's
// are), per pool and per country. A session name is chosen by the client and guessable:
// another identity sending the same one gets a session, and a lease, of
// its own, never the first caller's upstream or its lease limit
// (docs/decisions/0220-gateway-session-belongs-to-its-caller.md).
type sessionKey struct {
	owner, namespace, pool, country, id string
}

func sessionKeyOf(c caller) sessionKey {
	return sessionKey{owner: c.user.Identity(), namespace: c.target.Namespace, pool: c.target.Pool, country: c.target.Country, id: c.target.Session}
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
