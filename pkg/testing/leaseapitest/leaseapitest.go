// Package leaseapitest runs the lease API in process for the tests of its
// HTTP callers, such as the gateway: a real store behind a real server, on
// an httptest listener. The caller reaches it by URL, as in production; what
// a test checks of the store's state it asks through API's methods, so that
// the caller's package names nothing of pkg/lease/store (the gateway speaks
// the lease client's terms only).
//
// It is not a fake: nothing of the store or the server is replaced. It is
// not a cluster either: proxies come from Upsert, not from informers.
package leaseapitest

import (
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Config is what Start builds; zero fields take the defaults named.
type Config struct {
	// Key signs lease IDs (at least 32 bytes); the replicas of one test
	// share it. Required.
	Key []byte
	// Clock drives the store. Default: the real clock.
	Clock clock.WithTicker
	// DefaultTTL is the TTL of an acquire that names none. Default: the
	// store's.
	DefaultTTL time.Duration
	// Site is the store's Config.Site (a host's site, the unit bans are
	// counted in). Default: every host is its own site.
	Site func(host string) string
	// SiteBanProxies is the store's Config.SiteBanProxies. Default: the
	// store's.
	SiteBanProxies int
	// Authenticator and Authorizer check every call. Default: auth.None.
	Authenticator auth.Authenticator
	Authorizer    auth.Authorizer
	// Horizon persists the leader's horizon; replicas that hand over to
	// each other share one. Default: a new failover.MemoryHorizon.
	Horizon failover.HorizonStore
}

// API is one replica's lease API. It serves until the test ends; it leads
// once its Server has StartLeading.
type API struct {
	// URL is the API's base URL, for client.New or gateway.RemoteConfig.
	URL string
	// Server is the replica's server: StartLeading, StopLeading.
	Server *server.Server
	store  *store.Store
}

// Start starts a replica of the lease API that does not lead yet.
func Start(t testing.TB, cfg Config) *API {
	t.Helper()
	st, err := store.New(store.Config{Key: cfg.Key, Clock: cfg.Clock, DefaultTTL: cfg.DefaultTTL, Site: cfg.Site, SiteBanProxies: cfg.SiteBanProxies})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Authenticator == nil {
		cfg.Authenticator = auth.None{}
	}
	if cfg.Authorizer == nil {
		cfg.Authorizer = auth.None{}
	}
	if cfg.Horizon == nil {
		cfg.Horizon = &failover.MemoryHorizon{}
	}
	srv, err := server.New(server.Config{Store: st, Authenticator: cfg.Authenticator, Authorizer: cfg.Authorizer, Horizon: cfg.Horizon})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &API{URL: hs.URL, Server: srv, store: st}
}

// Proxy is a Ready proxy for the store to lease, as the Proxy feed would
// hand it over.
type Proxy struct {
	Namespace, Name string
	// URL is where the proxy listens (http://host:port).
	URL    string
	Labels map[string]string
	// Pool is the ProxyPool the proxy is a member of, "" if none.
	Pool string
	// MaxLeases is how many leases it takes at once; 0: one.
	MaxLeases     int32
	LatencyMillis int64
	// ReadySince is when it became Ready.
	ReadySince time.Time
	// ExitCountry is its measured exit country ("DE"), "" unknown.
	ExitCountry string
}

// Upsert adds p, or updates the proxy of its name. Its UID is "uid-"+name.
func (a *API) Upsert(p Proxy) {
	a.store.Upsert(store.ProxyInfo{
		Key: store.ObjectName{Namespace: p.Namespace, Name: p.Name}, UID: types.UID("uid-" + p.Name), Ready: true,
		URL: p.URL, Labels: p.Labels, Pool: p.Pool, MaxLeases: max(1, p.MaxLeases),
		LatencyMillis: p.LatencyMillis, ReadySince: p.ReadySince, ExitCountry: p.ExitCountry,
	})
}

// SessionProxies names the proxies of the live leases that owner's session
// holds in scope (the session's namespace term).
func (a *API) SessionProxies(owner, scope, session string) []string {
	var names []string
	for _, l := range a.store.SessionLeases(owner, scope, session) {
		names = append(names, l.Proxy.Key.Name)
	}
	return names
}

// LiveLeases counts the live leases of every owner.
func (a *API) LiveLeases() (int, error) {
	all, err := a.store.List(store.LeaseFilter{})
	return len(all), err
}

// PoolOutcomes is what the store counted for the pool's members.
func (a *API) PoolOutcomes(namespace, pool string) store.Outcomes {
	return a.store.PoolOutcomes(store.ObjectName{Namespace: namespace, Name: pool})
}

// BurnByProxy is the store's burn of namespace's proxies within window, by
// proxy name.
func (a *API) BurnByProxy(namespace string, window time.Duration) (map[string]store.Burn, error) {
	return a.store.BurnByProxy(namespace, window)
}
