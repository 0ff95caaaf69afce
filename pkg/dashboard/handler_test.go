package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

// callers accepts two tokens: "admin" may list everywhere, "viewer" in
// namespace a only.
type callers struct{}

func (callers) Authenticate(_ context.Context, token string) (auth.User, error) {
	switch token {
	case "admin", "viewer":
		return auth.User{Name: token}, nil
	}
	return auth.User{}, fmt.Errorf("%w: unknown token", auth.ErrUnauthenticated)
}

func (callers) Authorize(_ context.Context, u auth.User, attrs auth.Attributes) (bool, string, error) {
	return attrs.Verb == auth.VerbList && (u.Name == "admin" || attrs.Namespace == "a"), "", nil
}

// fleet is the Inputs a test changes while the hub runs.
type fleet struct {
	mu sync.Mutex
	in Inputs
}

func (f *fleet) inputs() Inputs { f.mu.Lock(); defer f.mu.Unlock(); return f.in }

func (f *fleet) set(in Inputs) { f.mu.Lock(); defer f.mu.Unlock(); f.in = in }

func twoNamespaces(desiredInA int32) Inputs {
	return Inputs{
		Pools:       []*crawlv1alpha1.ProxyPool{pool("a", "p", desiredInA), pool("b", "q", 1)},
		Proxies:     []*crawlv1alpha1.Proxy{member("a", "p-1", "p"), member("b", "q-1", "q")},
		Leases:      []Lease{{Namespace: "b", Proxy: "q-1", Holder: "someone", Domain: "b.example"}},
		LeasesKnown: true,
	}
}

func startDashboard(t *testing.T, f *fleet, maxViewers int) (*httptest.Server, *Hub) {
	t.Helper()
	return startDashboardWith(t, f, maxViewers, callers{})
}

// startDashboardWith serves the dashboard over f with the callers of a
// --lease-auth.
func startDashboardWith(t *testing.T, f *fleet, maxViewers int, who interface {
	auth.Authenticator
	auth.Authorizer
}) (*httptest.Server, *Hub) {
	t.Helper()
	hub := NewHub(HubConfig{Inputs: f.inputs, Debounce: time.Millisecond, LeaseRefresh: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = hub.Run(ctx) }()
	h, err := NewHandler(Config{Hub: hub, Authenticator: who, Authorizer: who, MaxViewers: maxViewers})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, serve := range h.Routes() {
		mux.HandleFunc(pattern, serve)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	// The first View is published before Run waits for anything.
	deadline := time.Now().Add(10 * time.Second)
	for _, v, _ := hub.Current(); v == 0; _, v, _ = hub.Current() {
		if time.Now().After(deadline) {
			t.Fatal("no View published")
		}
		runtime.Gosched()
	}
	return srv, hub
}

func get(t *testing.T, srv *httptest.Server, path, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func poolNames(m Message) []string {
	out := []string{}
	for _, p := range m.View.Pools {
		out = append(out, fmt.Sprintf("%s/%s:%d", p.Namespace, p.Name, p.Desired))
	}
	return out
}

func TestViewIsCutToWhatTheViewerMayList(t *testing.T) {
	f := &fleet{in: twoNamespaces(3)}
	srv, _ := startDashboard(t, f, 0)
	tests := map[string]struct {
		token      string
		wantStatus int
		wantPools  []string
		wantAll    bool
	}{
		"no token":      {wantStatus: http.StatusUnauthorized},
		"unknown token": {token: "guess", wantStatus: http.StatusUnauthorized},
		"admin":         {token: "admin", wantStatus: http.StatusOK, wantPools: []string{"a/p:3", "b/q:1"}, wantAll: true},
		"viewer of a":   {token: "viewer", wantStatus: http.StatusOK, wantPools: []string{"a/p:3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := get(t, srv, "/ui/api/view", tc.token)
			defer resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			var m Message
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantPools, poolNames(m)); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			if m.AllNamespaces != tc.wantAll || m.User != tc.token {
				t.Errorf("user %q all %v", m.User, m.AllNamespaces)
			}
		})
	}
}

// readEvent reads one "event: view" from a stream.
func readEvent(t *testing.T, r *bufio.Reader) Message {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var m Message
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
}

func TestStreamPushesChangesAndBoundsViewers(t *testing.T) {
	f := &fleet{in: twoNamespaces(3)}
	srv, hub := startDashboard(t, f, 1)
	resp := get(t, srv, "/ui/api/stream", "viewer")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	events := bufio.NewReader(resp.Body)
	if diff := cmp.Diff([]string{"a/p:3"}, poolNames(readEvent(t, events))); diff != "" {
		t.Errorf("first event (-want +got):\n%s", diff)
	}

	// One viewer is the limit here: the next is refused, not queued.
	second := get(t, srv, "/ui/api/stream", "admin")
	second.Body.Close()
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second viewer: status %d, want 503", second.StatusCode)
	}

	// The pool in a scales: the viewer gets it without asking again.
	f.set(twoNamespaces(5))
	hub.Poke()
	if diff := cmp.Diff([]string{"a/p:5"}, poolNames(readEvent(t, events))); diff != "" {
		t.Errorf("after scaling (-want +got):\n%s", diff)
	}
}

// Under --lease-auth=none (make run) no token is asked for and everything
// is shown.
func TestWithoutAuthEverythingIsShown(t *testing.T) {
	srv, _ := startDashboardWith(t, &fleet{in: twoNamespaces(3)}, 0, auth.None{})
	login := get(t, srv, "/ui/api/login", "")
	defer login.Body.Close()
	var required map[string]bool
	if err := json.NewDecoder(login.Body).Decode(&required); err != nil || required["tokenRequired"] {
		t.Errorf("login: %v, %v: want no token required", required, err)
	}
	resp := get(t, srv, "/ui/api/view", "")
	defer resp.Body.Close()
	var m Message
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/p:3", "b/q:1"}, poolNames(m)); diff != "" || !m.AllNamespaces {
		t.Errorf("pools (-want +got):\n%s (all namespaces: %v)", diff, m.AllNamespaces)
	}
}

func TestLoginSaysWhetherATokenIsRequired(t *testing.T) {
	srv, _ := startDashboard(t, &fleet{}, 0)
	resp := get(t, srv, "/ui/api/login", "")
	defer resp.Body.Close()
	var got map[string]bool
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"tokenRequired": true}, got); diff != "" {
		t.Errorf("login (-want +got):\n%s", diff)
	}
}

func TestPageIsServedWithAStrictPolicy(t *testing.T) {
	srv, _ := startDashboard(t, &fleet{}, 0)
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/app.css"} {
		resp := get(t, srv, path, "")
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
}

// tokens authenticates any token as the user of that name, and authorizes
// with its reviewer.
type tokens struct{ *reviewer }

func (tokens) Authenticate(_ context.Context, token string) (auth.User, error) {
	if token == "" {
		return auth.User{}, fmt.Errorf("%w: no token", auth.ErrUnauthenticated)
	}
	return auth.User{Name: token}, nil
}

// An identity bound to no role is refused at once, on every route, for one
// review however often it asks, and takes no slot: with one slot, the
// viewer after it still gets in.
func TestRolelessViewerIsRefusedWithoutASlot(t *testing.T) {
	r := &reviewer{allowed: map[string]bool{"a": true}}
	srv, _ := startDashboardWith(t, &fleet{in: twoNamespaces(3)}, 1, tokens{r})
	for i := range 10 {
		for _, path := range []string{"/ui/api/stream", "/ui/api/view"} {
			resp := get(t, srv, path, "nobody")
			var body map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body["error"], "no namespace") {
				t.Fatalf("request %d to %s: %d %v, want 403 naming the reason", i, path, resp.StatusCode, body)
			}
		}
	}
	// Without Bindings a and b are candidates: one review across all
	// namespaces and one each, once.
	if n := r.reviews.Load(); n != 3 {
		t.Errorf("20 requests of a role-less identity made %d reviews, want 3 (kept per identity)", n)
	}
	resp := get(t, srv, "/ui/api/stream", "tenant")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the one slot was taken: a viewer of a got %d", resp.StatusCode)
	}
	if diff := cmp.Diff([]string{"a/p:3"}, poolNames(readEvent(t, bufio.NewReader(resp.Body)))); diff != "" {
		t.Errorf("tenant's first event (-want +got):\n%s", diff)
	}
}

// One identity cannot take every slot, and tenants, however many
// identities they have, leave the kept slots to viewers of every namespace.
func TestSlotsPerIdentityAndKeptForAll(t *testing.T) {
	r := &reviewer{allowed: map[string]bool{"a": true}}
	hub := NewHub(HubConfig{Inputs: (&fleet{in: twoNamespaces(3)}).inputs, Debounce: time.Millisecond, LeaseRefresh: time.Hour})
	h, err := NewHandler(Config{Hub: hub, Authenticator: tokens{r}, Authorizer: r, MaxViewers: 4, MaxViewersPerIdentity: 2, ViewersKeptForAll: 1})
	if err != nil {
		t.Fatal(err)
	}
	take := func(identity string, all bool) error {
		_, err := h.slots.take(identity, all)
		return err
	}
	steps := []struct {
		identity string
		all      bool
		want     error
	}{
		{"t1", false, nil}, {"t1", false, nil}, {"t1", false, errIdentityFull},
		{"t2", false, nil}, {"t3", false, errViewersFull}, // the fourth slot is kept
		{"admin", true, nil}, {"admin2", true, errViewersFull},
	}
	for i, s := range steps {
		if err := take(s.identity, s.all); !errors.Is(err, s.want) {
			t.Errorf("step %d (%s): %v, want %v", i, s.identity, err, s.want)
		}
	}
	release, err := h.slots.take("t9", true)
	if !errors.Is(err, errViewersFull) || release != nil {
		t.Errorf("a fifth slot: %v", err)
	}
}
