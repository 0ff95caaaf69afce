package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/testing/leaseapitest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const tierGatewayToken = "gateway-token"

// tierAuth is the lease API's auth in the tier tests: the gateway's token
// alone may act-for; everyone may do the rest.
type tierAuth struct{}

func (tierAuth) Authenticate(_ context.Context, token string) (auth.User, error) {
	if token != tierGatewayToken {
		return auth.User{}, auth.ErrUnauthenticated
	}
	return auth.User{Name: "system:serviceaccount:crawl-system:gateway", UID: "gw"}, nil
}

func (tierAuth) Authorize(_ context.Context, u auth.User, attrs auth.Attributes) (bool, string, error) {
	if attrs.Verb == auth.VerbActFor {
		return u.UID == "gw", "", nil
	}
	return true, "", nil
}

// tier is two lease API replicas (the first leading) sharing a key and a
// horizon, and two gateways that reach them over HTTP.
type tier struct {
	replicas [2]*leaseapitest.API
	gateways [2]string
}

func startTier(t *testing.T, upstreams ...string) *tier {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	horizon := &failover.MemoryHorizon{}
	var ups []leaseapitest.Proxy
	for _, name := range upstreams {
		p := proxytest.StartInProcess(t, proxytest.Options{})
		ups = append(ups, leaseapitest.Proxy{
			Namespace: "crawl", Name: name,
			URL: "http://" + p.Addr, Labels: map[string]string{gateway.PoolLabel: "p"}, Pool: "p", MaxLeases: 1, ReadySince: t0,
		})
	}
	tr := &tier{}
	for i := range tr.replicas {
		api := leaseapitest.Start(t, leaseapitest.Config{Key: []byte("gateway-tier-test-key-of-32-byte"), DefaultTTL: 30 * time.Second,
			Authenticator: tierAuth{}, Authorizer: tierAuth{}, Horizon: horizon})
		for _, p := range ups {
			api.Upsert(p)
		}
		tr.replicas[i] = api
	}
	if err := tr.replicas[0].Server.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range tr.gateways {
		// The standby first: its NotLeader answer must send calls on.
		remote, err := gateway.NewRemote(gateway.RemoteConfig{
			URLs:  []string{tr.replicas[1].URL, tr.replicas[0].URL},
			Token: func(context.Context) (string, error) { return tierGatewayToken, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		auth := auth.None{}
		gw, err := gateway.New(gateway.Config{Leases: remote, Authenticator: auth, Authorizer: auth, AuthNone: true})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr.gateways[i] = ln.Addr().String()
		gctx, cancel := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- gw.Serve(gctx, ln) }()
		t.Cleanup(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	return tr
}

// sessionLeases are the proxies of the session's live leases on api.
func sessionLeases(api *leaseapitest.API, session string) []string {
	return api.SessionProxies(anonymous, "crawl", session)
}

func TestRemoteSessionOnTwoGatewaysKeepsItsUpstreamAcrossAFailover(t *testing.T) {
	tr := startTier(t, "a", "b", "c")
	target := proxytest.StartHTTPTarget(t)
	through := func(gw int, username string) {
		t.Helper()
		u := &unit{addr: tr.gateways[gw]}
		if status, body := u.get(t, username, target.URL+"/echo"); status != http.StatusOK {
			t.Fatalf("through gateway %d as %s: %d %s", gw, username, status, body)
		}
	}
	through(0, "ns-crawl+session-s")
	through(1, "ns-crawl+session-s")
	through(1, "ns-crawl") // rotating: released at its end
	leader, standby := tr.replicas[0], tr.replicas[1]
	held := sessionLeases(leader, "s")
	if len(held) != 1 {
		t.Fatalf("session s on two gateways holds %v on the leader, want one lease (owned by the user, not the gateway)", held)
	}
	// The rotating lease goes when its tunnel closes, a moment after the
	// client has its answer.
	if err := proxytest.Poll(5*time.Second, func() bool {
		live, err := leader.LiveLeases()
		return err == nil && live == 1
	}); err != nil {
		live, _ := leader.LiveLeases()
		t.Errorf("%d live leases after one session and one rotating connection, want 1: %v", live, err)
	}

	// Graceful handover: the new leader recovers until the old leader's
	// lease expires, yet the session goes on through both gateways on the
	// same upstream.
	ctx := t.Context()
	if err := leader.Server.StopLeading(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Server.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	through(1, "ns-crawl+session-s")
	through(0, "ns-crawl+session-s")
	if diff := cmp.Diff(held, sessionLeases(standby, "s")); diff != "" {
		t.Errorf("session s after the failover (-before +after):\n%s", diff)
	}
}

func TestRemoteHoldsAcquiresWhileNoLeaderAnswers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens: like a Service without a leader endpoint
	remote, err := gateway.NewRemote(gateway.RemoteConfig{URLs: []string{down.URL}, LeaderWait: 1500 * time.Millisecond,
		Token: func(context.Context) (string, error) { return tierGatewayToken, nil }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = remote.Acquire(ctx, auth.User{Name: "u"}, client.AcquireRequest{Holder: "h"})
	if !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Acquire without a leader: err = %v, want ErrNotLeader", err)
	}
	// Held for the leader wait, not refused at once (bounds, not timing: at
	// least one retry round happened).
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("Acquire gave up after %v, want it held for the 1.5s leader wait", waited)
	}
	if remote.LeaderReachable() {
		t.Error("LeaderReachable with no leader")
	}
}

// TestRemoteTakesAForeignAnswerForNoLeader: an answer without the lease
// API's error body (an empty 404 from whatever a Service without ready
// endpoints reached) is not the API saying the lease is unknown: the call
// waits for a leader like a refused connection does, and dials afresh for
// each try instead of reusing the connection that led astray.
func TestRemoteTakesAForeignAnswerForNoLeader(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for name, h := range map[string]http.Handler{
		"empty 404": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }),
		"html 502": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
		}),
	} {
		t.Run(name, func(t *testing.T) {
			foreign := httptest.NewUnstartedServer(h)
			var dials atomic.Int32
			foreign.Config.ConnState = func(_ net.Conn, state http.ConnState) {
				if state == http.StateNew {
					dials.Add(1)
				}
			}
			foreign.Start()
			defer foreign.Close()
			remote, err := gateway.NewRemote(gateway.RemoteConfig{URLs: []string{foreign.URL}, LeaderWait: time.Second,
				Token: func(context.Context) (string, error) { return tierGatewayToken, nil }})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = remote.Acquire(ctx, auth.User{Name: "u"}, client.AcquireRequest{Holder: "h"})
			if !errors.Is(err, client.ErrNotLeader) {
				t.Fatalf("Acquire answered by %s: err = %v, want ErrNotLeader (held, then no leader)", name, err)
			}
			if n := dials.Load(); n < 2 {
				t.Errorf("the held acquire dialed %d connection(s), want a new one per try", n)
			}
			if remote.LeaderReachable() {
				t.Error("LeaderReachable after foreign answers only")
			}
		})
	}
}
