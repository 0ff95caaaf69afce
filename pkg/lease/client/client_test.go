package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

const testToken = "t0k3n"

// tokenAuth lets in the one test token, with every permission.
type tokenAuth struct{}

// Besides the test token: the gateway's (which alone may act-for) and
// alice's; user "mallory" may do nothing.
const (
	gatewayToken = "g4t3way"
	aliceToken   = "al1ce"
)

func (tokenAuth) Authenticate(_ context.Context, token string) (auth.User, error) {
	switch token {
	case testToken:
		return auth.User{Name: "crawler"}, nil
	case gatewayToken:
		return auth.User{Name: "system:serviceaccount:crawl-system:gateway", UID: "g1"}, nil
	case aliceToken:
		return auth.User{Name: "alice", UID: "a1", Groups: []string{"crawlers"}}, nil
	}
	return auth.User{}, auth.ErrUnauthenticated
}

func (tokenAuth) Authorize(_ context.Context, u auth.User, attrs auth.Attributes) (bool, string, error) {
	if attrs.Verb == auth.VerbActFor {
		return u.Name == "system:serviceaccount:crawl-system:gateway", "", nil
	}
	return u.Name != "mallory", "", nil
}

type apiServer struct {
	url    string
	store  *store.Store
	renews atomic.Int32
}

// startAPI serves a leading lease API on loopback with proxies p1 (whose
// credentials are u1/pw1) and p2, and short TTLs so that Hold renews often.
func startAPI(t *testing.T) *apiServer {
	t.Helper()
	return startAPIWith(t, func(_ context.Context, l store.Lease) (*proxyaccess.Credentials, error) {
		if l.Proxy.Key.Name == "p1" {
			return &proxyaccess.Credentials{Username: "u1", Password: "pw1"}, nil
		}
		return nil, nil
	})
}

// startAPIWith is startAPI with the credentials creds hands out.
func startAPIWith(t *testing.T, creds server.CredentialsFunc) *apiServer {
	t.Helper()
	st, err := store.New(store.Config{
		Key:    []byte("0123456789abcdef0123456789abcdef"),
		MinTTL: 30 * time.Millisecond, DefaultTTL: 300 * time.Millisecond, MaxTTL: time.Minute,
		MaxWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"p1", "p2"} {
		st.Upsert(store.ProxyInfo{
			Key: store.ObjectName{Namespace: "crawl", Name: name}, UID: types.UID(name), Ready: true,
			URL: "http://127.0.0.1:3128" + strings.Repeat("0", i), Labels: map[string]string{"n": name}, LatencyMillis: int64(10 * (i + 1)), MaxLeases: 1,
		})
	}
	srv, err := server.New(server.Config{
		Store: st, Authenticator: tokenAuth{}, Authorizer: tokenAuth{}, Horizon: &failover.MemoryHorizon{},
		Credentials: creds,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	api := &apiServer{store: st}
	handler := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/renew") {
			api.renews.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	api.url = ts.URL
	return api
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(func(context.Context) (string, error) { return testToken, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewValidatesTheURL(t *testing.T) {
	for url, wantErr := range map[string]bool{
		"http://127.0.0.1:8080":     false,
		"https://lease.example/api": false,
		"127.0.0.1:8080":            true,
		"ftp://x":                   true,
		"http://":                   true,
		"::":                        true,
	} {
		if _, err := client.New(url); (err != nil) != wantErr {
			t.Errorf("New(%q): err = %v, want error %v", url, err, wantErr)
		}
	}
}

func TestClientCalls(t *testing.T) {
	api := startAPI(t)
	c := newClient(t, api.url)
	ctx := t.Context()

	l, err := c.Acquire(ctx, client.AcquireRequest{Holder: "w1", Namespace: "crawl", TTL: time.Second, Domain: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	want := &client.Lease{
		Holder:      "w1",
		Proxy:       client.LeasedProxy{Namespace: "crawl", Name: "p1", URL: "http://127.0.0.1:3128", LatencyMillis: 10},
		Credentials: &client.Credentials{Username: "u1", Password: "pw1"},
		Domain:      "example.com",
		TTL:         time.Second,
	}
	if diff := cmp.Diff(want, l, cmpopts.IgnoreFields(client.Lease{}, "ID", "GrantedAt", "ExpiresAt"), cmpopts.IgnoreUnexported(client.Lease{})); diff != "" {
		t.Errorf("Acquire (-want +got):\n%s", diff)
	}
	if u, err := l.ProxyURL(); err != nil || u.String() != "http://u1:pw1@127.0.0.1:3128" {
		t.Errorf("ProxyURL = %v, %v", u, err)
	}

	renewed, err := c.Renew(ctx, l.ID, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.TTL != 2*time.Second || renewed.Credentials != nil || !renewed.ExpiresAt.After(l.ExpiresAt) {
		t.Errorf("Renew = %+v", renewed)
	}
	got, err := c.Lease(ctx, renewed.ID)
	if err != nil || got.Holder != "w1" {
		t.Errorf("Lease = %+v, %v", got, err)
	}
	leases, err := c.Leases(ctx, client.LeasesFilter{Holder: "w1", Namespace: "crawl"})
	if err != nil || len(leases) != 1 || leases[0].Proxy.Name != "p1" {
		t.Errorf("Leases = %+v, %v", leases, err)
	}
	proxies, err := c.Proxies(ctx, "crawl", "n=p2")
	wantProxies := []client.Proxy{{Namespace: "crawl", Name: "p2", URL: "http://127.0.0.1:31280", Labels: map[string]string{"n": "p2"}, LatencyMillis: 20, MaxLeases: 1, FreeLeases: 1}}
	if diff := cmp.Diff(wantProxies, proxies); err != nil || diff != "" {
		t.Errorf("Proxies (-want +got):\n%s (err %v)", diff, err)
	}
	if err := c.Release(ctx, renewed.ID, client.OutcomeBanned, ""); err != nil {
		t.Fatal(err)
	}
	_, err = c.Renew(ctx, renewed.ID, 0)
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Renew after release: err = %v, want ErrLeaseLost", err)
	}
	// p1 cools down for example.com; p2 is taken, so nothing is left.
	if _, err := c.Acquire(ctx, client.AcquireRequest{Holder: "w2"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, client.AcquireRequest{Holder: "w3", Domain: "example.com"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || !errors.Is(err, client.ErrUnavailable) || apiErr.Code != "CoolingDown" || apiErr.RetryAfter != time.Minute {
		t.Errorf("Acquire while cooling down: err = %#v, want 503 CoolingDown after 1m", err)
	}
}

func TestActingFor(t *testing.T) {
	api := startAPI(t)
	ctx := t.Context()
	withToken := func(token string) *client.Client {
		c, err := client.New(api.url, client.WithToken(func(context.Context) (string, error) { return token, nil }))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	gateway, alice := withToken(gatewayToken), withToken(aliceToken)

	// The gateway acquires for alice: the lease is hers, so her own token
	// renews it, and the gateway's own identity holds nothing.
	l, err := gateway.ActingFor("alice", "a1", []string{"crawlers"}).Acquire(ctx, client.AcquireRequest{Holder: "gateway:alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Renew(ctx, l.ID, 0); err != nil {
		t.Errorf("alice renewing the lease the gateway acquired for her: %v", err)
	}
	if _, err := gateway.Renew(ctx, l.ID, 0); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("the gateway renewing as itself: err = %v, want ErrLeaseLost (not its lease)", err)
	}

	for _, tc := range []struct {
		name     string
		c        *client.Client
		wantCode string
	}{
		{"a crawler may not act for anyone", withToken(testToken).ActingFor("alice", "a1", nil), "Forbidden"},
		{"the gateway gets no more than the user has", gateway.ActingFor("mallory", "", nil), "Forbidden"},
		{"a user name is required", gateway.ActingFor("", "a1", nil), "Invalid"},
		{"an unauthenticated caller is refused first", withToken("").ActingFor("alice", "a1", nil), "Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Acquire(ctx, client.AcquireRequest{Holder: "x"})
			var apiErr *client.Error
			if !errors.As(err, &apiErr) || apiErr.Code != tc.wantCode {
				t.Errorf("Acquire: err = %v, want code %s", err, tc.wantCode)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	api := startAPI(t)
	ctx := t.Context()
	anonymous, err := client.New(api.url)
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *client.Error
	if _, err := anonymous.Leases(ctx, client.LeasesFilter{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "Unauthorized" {
		t.Errorf("without a token: err = %v, want 401 Unauthorized", err)
	}
	c := newClient(t, api.url)
	if _, err := c.Acquire(ctx, client.AcquireRequest{Holder: "w", TTL: time.Hour}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "ttl" {
		t.Errorf("TTL out of bounds: err = %v, want 400 on ttl", err)
	}
	failing, err := client.New(api.url, client.WithToken(func(context.Context) (string, error) { return "", errors.New("no token file") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failing.Leases(ctx, client.LeasesFilter{}); err == nil || !strings.Contains(err.Error(), "no token file") {
		t.Errorf("failing token source: err = %v", err)
	}
}

// TestErrNotLeaderIsAStandbysAnswer: a replica that does not lead answers
// 503 NotLeader, which matches ErrNotLeader (and ErrUnavailable); the
// leader's own 503s do not.
func TestErrNotLeaderIsAStandbysAnswer(t *testing.T) {
	ctx := t.Context()
	st, err := store.New(store.Config{Key: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: st, Authenticator: tokenAuth{}, Authorizer: tokenAuth{}, Horizon: &failover.MemoryHorizon{}})
	if err != nil {
		t.Fatal(err)
	}
	standby := httptest.NewServer(srv.Handler())
	t.Cleanup(standby.Close)
	if err := newClient(t, standby.URL).Ready(ctx); !errors.Is(err, client.ErrNotLeader) || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Ready on a standby: err = %v, want ErrNotLeader and ErrUnavailable", err)
	}
	if _, err := newClient(t, standby.URL).Acquire(ctx, client.AcquireRequest{Holder: "w"}); !errors.Is(err, client.ErrNotLeader) {
		t.Errorf("Acquire on a standby: err = %v, want ErrNotLeader", err)
	}
	leader := newClient(t, startAPI(t).url)
	for range 2 {
		if _, err := leader.Acquire(ctx, client.AcquireRequest{Holder: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = leader.Acquire(ctx, client.AcquireRequest{Holder: "w"})
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrNotLeader) {
		t.Errorf("Acquire on the leader with nothing free: err = %v, want ErrUnavailable and not ErrNotLeader", err)
	}
}

func TestHoldRenewsAndReleases(t *testing.T) {
	for name, tc := range map[string]struct {
		fnErr       error
		wantErr     bool
		wantCooling bool
	}{
		"ok":     {},
		"banned": {fnErr: client.Banned("example.com"), wantErr: true, wantCooling: true},
		"wrapped ban": {
			fnErr: errors.Join(errors.New("403 from the site"), client.Banned("example.com")), wantErr: true, wantCooling: true,
		},
		"error": {fnErr: errors.New("parse failure"), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			api := startAPI(t)
			c := newClient(t, api.url)
			var held client.Lease
			// A renewal every third of the TTL: 600 ms late before the lease
			// expires, which a loaded machine running -race still meets.
			err := c.Hold(t.Context(), client.AcquireRequest{Holder: "w", TTL: 900 * time.Millisecond}, func(ctx context.Context, l client.Lease) error {
				held = l
				// Outlive the TTL several times over: renewals keep the lease.
				// Not poll: its t.Fatal would end this goroutine, not the test,
				// and Hold would wait for fn forever.
				waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := eventually.Poll(waitCtx, 5*time.Millisecond, func(context.Context) error {
					if n := api.renews.Load(); n < 3 {
						return fmt.Errorf("%d renewals", n)
					}
					return nil
				}); err != nil {
					t.Errorf("renewals while holding: %v", err)
				}
				if _, err := api.store.GetAs(auth.User{Name: "crawler"}.Identity(), l.ID); err != nil {
					t.Errorf("lease after renewals: %v", err)
				}
				return tc.fnErr
			})
			if (err != nil) != tc.wantErr || (tc.wantErr && !errors.Is(err, tc.fnErr)) {
				t.Fatalf("Hold: err = %v, want %v", err, tc.fnErr)
			}
			if held.Credentials == nil || held.Proxy.Name != "p1" {
				t.Errorf("the function got %+v", held)
			}
			leases, err := api.store.List(store.LeaseFilter{})
			if err != nil || len(leases) != 0 {
				t.Errorf("leases after Hold: %+v (%v), want none", leases, err)
			}
			_, err = api.store.Acquire(t.Context(), store.AcquireRequest{Holder: "x", Domain: "example.com", Selector: labels.SelectorFromSet(labels.Set{"n": "p1"})})
			cooling := errors.Is(err, store.ErrCoolingDown)
			if cooling != tc.wantCooling {
				t.Errorf("p1 cooling down for example.com: %v, want %v (%v)", cooling, tc.wantCooling, err)
			}
		})
	}
}

// TestHoldFollowsFreshCredentials: a proxy that checks lease credentials
// gets fresh ones with each renewal; the function's ProxyURL and ProxyFunc
// carry the latest without it doing anything.
func TestHoldFollowsFreshCredentials(t *testing.T) {
	api := startAPIWith(t, func(_ context.Context, l store.Lease) (*proxyaccess.Credentials, error) {
		return &proxyaccess.Credentials{Username: "u", Password: "until-" + l.ExpiresAt.Format(time.RFC3339Nano), LeaseBound: true}, nil
	})
	c := newClient(t, api.url)
	err := c.Hold(t.Context(), client.AcquireRequest{Holder: "w", TTL: 900 * time.Millisecond}, func(ctx context.Context, l client.Lease) error {
		first, _ := l.ProxyURL()
		proxy := l.ProxyFunc()
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := eventually.Poll(waitCtx, 5*time.Millisecond, func(context.Context) error {
			if n := api.renews.Load(); n < 2 {
				return fmt.Errorf("%d renewals", n)
			}
			return nil
		}); err != nil {
			t.Errorf("renewals while holding: %v", err)
		}
		latest, _ := proxy(nil)
		live, err := api.store.List(store.LeaseFilter{})
		if err != nil || len(live) != 1 {
			t.Fatalf("live leases %v, %v", live, err)
		}
		pass, _ := latest.User.Password()
		firstPass, _ := first.User.Password()
		if pass == firstPass || !strings.HasPrefix(pass, "until-") {
			t.Errorf("ProxyFunc's password %q after renewals, want a renewal's, not the grant's %q", pass, firstPass)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHoldStopsWhenTheLeaseIsLost(t *testing.T) {
	api := startAPI(t)
	c := newClient(t, api.url)
	err := c.Hold(t.Context(), client.AcquireRequest{Holder: "w", TTL: 90 * time.Millisecond}, func(ctx context.Context, l client.Lease) error {
		// The proxy turns Unhealthy: the next renewal is refused, and ctx ends.
		api.store.Upsert(store.ProxyInfo{Key: store.ObjectName{Namespace: l.Proxy.Namespace, Name: l.Proxy.Name}, UID: "p1", Ready: false, URL: l.Proxy.URL})
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
		return ctx.Err()
	})
	var apiErr *client.Error
	if !errors.Is(err, client.ErrLeaseLost) || !errors.As(err, &apiErr) || apiErr.Code != "Revoked" {
		t.Errorf("Hold: err = %v, want ErrLeaseLost from a 410 Revoked", err)
	}
}

func TestHoldWithNothingFree(t *testing.T) {
	api := startAPI(t)
	c := newClient(t, api.url)
	called := false
	err := c.Hold(t.Context(), client.AcquireRequest{Holder: "w", Selector: "n=none"}, func(context.Context, client.Lease) error {
		called = true
		return nil
	})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Code != "NoneFree" || apiErr.RetryAfter != time.Second || called {
		t.Errorf("Hold: err = %v, called %v; want 503 NoneFree and no call", err, called)
	}
}
