package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Defaults of RemoteConfig.
const (
	// DefaultLeaderWait is how long a new connection is held while no lease
	// API URL answers as the leader (a failover takes 15 to 25 seconds).
	DefaultLeaderWait = 30 * time.Second
	// leaderFresh is how long after a leader last answered the gateway
	// counts as reaching one (readiness).
	leaderFresh = 5 * time.Second
	// leaderRetry spaces the rounds over the URLs while no leader answers.
	leaderRetry = 500 * time.Millisecond
)

// RemoteConfig configures Remote.
type RemoteConfig struct {
	// URLs of the lease API, tried in order from the one that last answered
	// as the leader: the leases Service, or every replica's address.
	URLs []string
	// Token is the gateway's own bearer token; it must allow act-for on
	// callers.gateway.crawl.proxyfleet.io (the chart's gateway ClusterRole).
	Token client.TokenFunc
	// HTTP is the client of the calls. Default: newHTTPClient.
	HTTP *http.Client
	// LeaderWait holds a new connection's acquire while no URL answers as
	// the leader. Default DefaultLeaderWait.
	LeaderWait time.Duration
	Clock      clock.WithTicker
}

// Remote is the lease API over HTTP for the gateway tier: every call is
// made for the user the gateway authenticated (the act-for headers), on the
// URL that answers as the leader. A standby's 503 NotLeader, or a URL that
// cannot be reached, sends the call to the next URL.
type Remote struct {
	cfg     RemoteConfig
	clients []*client.Client
	// leader is the index of the URL that answered as the leader last;
	// lastLeader when (Unix nanoseconds, 0 never).
	leader     atomic.Int32
	lastLeader atomic.Int64
}

// NewRemote checks the URLs; it starts nothing (Watch keeps readiness).
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("gateway: at least one lease API URL is required")
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = DefaultLeaderWait
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.HTTP == nil {
		cfg.HTTP = newHTTPClient()
	}
	opts := []client.Option{client.WithToken(cfg.Token), client.WithHTTPClient(cfg.HTTP)}
	r := &Remote{cfg: cfg}
	for _, u := range cfg.URLs {
		c, err := client.New(u, opts...)
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

// newHTTPClient keeps as many connections to the lease API open as the
// gateway makes calls at once: the default transport keeps two per host,
// so every other call of a busy replica would open a new connection.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 1024
	return &http.Client{Timeout: 90 * time.Second, Transport: t}
}

// LeaderReachable reports whether a leader answered within the last few
// seconds: the gateway's readiness.
func (r *Remote) LeaderReachable() bool {
	last := r.lastLeader.Load()
	return last != 0 && r.cfg.Clock.Since(time.Unix(0, last)) < leaderFresh
}

// Watch asks the URLs for the leader every second while no call has
// reached one lately, so that readiness follows the leader, until ctx ends.
func (r *Remote) Watch(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		if !r.LeaderReachable() {
			_ = r.call(ctx, func(c *client.Client) error { return c.Ready(ctx) })
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// call runs fn on each URL from the last leader's until one answers as the
// leader (success, or any answer but NotLeader); it returns that answer, or
// client.ErrNotLeader when none did.
func (r *Remote) call(ctx context.Context, fn func(*client.Client) error) error {
	first := int(r.leader.Load())
	var last error
	for i := range r.clients {
		idx := (first + i) % len(r.clients)
		err := fn(r.clients[idx])
		if foreignAnswer(err) {
			// The kept-alive connection leads somewhere else (dialed before
			// kube-proxy had the Service's rule): dial afresh next time.
			klog.FromContext(ctx).V(2).Info("A lease API URL answered as no lease API does; dropping its connections", "url", r.cfg.URLs[idx], "answer", err.Error())
			r.cfg.HTTP.CloseIdleConnections()
		}
		if err != nil && notLeader(err) {
			last = err
			continue
		}
		r.leader.Store(int32(idx))
		r.lastLeader.Store(r.cfg.Clock.Now().UnixNano())
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	klog.FromContext(ctx).V(3).Info("No lease API URL answers as the leader", "urls", r.cfg.URLs, "last", last.Error())
	return client.ErrNotLeader
}

// notLeader is a standby's answer, a URL that cannot be reached now, or a
// foreign answer.
func notLeader(err error) bool {
	if apiErr := apiError(err); apiErr != nil {
		return apiErr.Code == wire.CodeNotLeader || apiErr.Code == ""
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// foreignAnswer is an HTTP answer without the lease API's error body. In
// the real-node suite a gateway Pod that started with the lease Service
// dialed its ClusterIP before kube-proxy had a rule for it: the connection
// left by the node's default route, something there answered an empty
// 404, and every call reused that kept-alive connection.
func foreignAnswer(err error) bool {
	return hasCode(err, "")
}

// Acquire holds the connection up to LeaderWait while there is no leader.
func (r *Remote) Acquire(ctx context.Context, user auth.User, req client.AcquireRequest) (client.Lease, *proxyaccess.Credentials, error) {
	var got *client.Lease
	acquire := func(c *client.Client) (err error) {
		got, err = c.ActingFor(user.Name, user.UID, user.Groups).Acquire(ctx, req)
		return err
	}
	deadline := r.cfg.Clock.Now().Add(r.cfg.LeaderWait)
	for {
		err := r.call(ctx, acquire)
		if !errors.Is(err, client.ErrNotLeader) || !r.cfg.Clock.Now().Before(deadline) {
			if err != nil {
				return client.Lease{}, nil, err
			}
			return *got, credentialsOf(got), nil
		}
		select {
		case <-ctx.Done():
			return client.Lease{}, nil, ctx.Err()
		case <-r.cfg.Clock.After(leaderRetry):
		}
	}
}

// Renew renews and returns the renewal's credentials when it carries any:
// the lease API sends them only when they are the lease's own, signed for
// its new end.
func (r *Remote) Renew(ctx context.Context, user auth.User, id string, ttl time.Duration, report client.Report) (client.Lease, *proxyaccess.Credentials, error) {
	var got *client.Lease
	err := r.call(ctx, func(c *client.Client) (err error) {
		got, err = c.ActingFor(user.Name, user.UID, user.Groups).RenewReporting(ctx, id, ttl, report)
		return err
	})
	if err != nil {
		return client.Lease{}, nil, err
	}
	creds := credentialsOf(got)
	if creds != nil {
		creds.LeaseBound = true
	}
	return *got, creds, nil
}

func (r *Remote) Release(ctx context.Context, user auth.User, id string, outcome client.Outcome, domain string, transferred int64) error {
	return r.call(ctx, func(c *client.Client) error {
		return c.ActingFor(user.Name, user.UID, user.Groups).ReleaseTransferred(ctx, id, outcome, domain, transferred)
	})
}

func (r *Remote) Get(ctx context.Context, user auth.User, id string) (client.Lease, error) {
	var got *client.Lease
	err := r.call(ctx, func(c *client.Client) (err error) {
		got, err = c.ActingFor(user.Name, user.UID, user.Groups).Lease(ctx, id)
		return err
	})
	if err != nil {
		return client.Lease{}, err
	}
	return *got, nil
}

func (r *Remote) ReleaseSession(ctx context.Context, user auth.User, scope, session string, outcome client.Outcome, domain string) error {
	return r.call(ctx, func(c *client.Client) error {
		return c.ActingFor(user.Name, user.UID, user.Groups).ReleaseSession(ctx, scope, session, outcome, domain)
	})
}

func credentialsOf(l *client.Lease) *proxyaccess.Credentials {
	if l.Credentials == nil {
		return nil
	}
	return &proxyaccess.Credentials{Username: l.Credentials.Username, Password: l.Credentials.Password}
}
