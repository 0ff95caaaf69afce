package lease

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// routeOf is how a request is routed: the pattern and the lease ID it is
// served with, or "" for a request the fast path leaves to the mux.
type routeOf struct {
	Pattern, ID string
}

// hotRouteOf parses a request head the way net/http does and asks hotRoute.
func hotRouteOf(t *testing.T, method, target string) (routeOf, *http.Request, bool) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
	if err != nil {
		return routeOf{}, nil, false
	}
	call, ok := hotRoute(r)
	if !ok {
		return routeOf{}, r, true
	}
	return routeOf{Pattern: call.pattern, ID: call.id}, r, true
}

// muxRouteOf is what the mux and the Handler's checks would do with r: the
// route, or "" for a 404/405 or a path the Handler refuses as unclean.
func muxRouteOf(s *Server, r *http.Request) routeOf {
	if cleanPath(r.URL.Path) != r.URL.Path {
		return routeOf{}
	}
	_, pattern := s.mux.Handler(r)
	if pattern != acquirePattern && pattern != releasePattern {
		return routeOf{Pattern: pattern}
	}
	// The same patterns on a mux of the test's, to read the ID the mux
	// extracts (the server's own handlers do not show it).
	var got routeOf
	probe := http.NewServeMux()
	for _, p := range []string{acquirePattern, releasePattern} {
		probe.HandleFunc(p, func(_ http.ResponseWriter, r *http.Request) { got = routeOf{Pattern: r.Pattern, ID: r.PathValue("id")} })
	}
	probe.ServeHTTP(&headerRecorder{header: http.Header{}}, r.Clone(r.Context()))
	return got
}

func TestHotRoute(t *testing.T) {
	ts := newTestServer(t)
	id := ts.acquire(`{"holder":"w"}`).ID
	tests := []struct {
		method, target string
		want           routeOf // empty: left to the mux
	}{
		{"POST", "/v1/leases", routeOf{acquirePattern, ""}},
		{"POST", "/v1/leases?wait=1s", routeOf{acquirePattern, ""}},
		{"DELETE", "/v1/leases/" + id, routeOf{releasePattern, id}},
		{"DELETE", "/v1/leases/" + id + "?outcome=banned&domain=example.com", routeOf{releasePattern, id}},
		// Everything else is the mux's, which answers as it always did.
		{"GET", "/v1/leases", routeOf{}},
		{"GET", "/v1/leases/" + id, routeOf{}},
		{"POST", "/v1/leases/", routeOf{}},
		{"POST", "/v1/leases/" + id + "/renew", routeOf{}},
		{"DELETE", "/v1/leases/", routeOf{}},
		{"DELETE", "/v1/leases/..", routeOf{}},
		{"DELETE", "/v1/leases/.", routeOf{}},
		{"DELETE", "/v1/leases/a/b", routeOf{}},
		{"DELETE", "/v1/leases//a", routeOf{}},
		{"DELETE", "/v1/leases/a%2Fb", routeOf{}},
		{"DELETE", "/v1/leases/%61", routeOf{}},
		{"DELETE", "/v1//leases/a", routeOf{}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			got, r, ok := hotRouteOf(t, tt.method, tt.target)
			if !ok {
				t.Fatal("not a request")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("hotRoute (-want +got):\n%s", diff)
			}
			if got != (routeOf{}) {
				if diff := cmp.Diff(muxRouteOf(ts.srv, r), got); diff != "" {
					t.Errorf("the mux routes it otherwise (-mux +hotRoute):\n%s", diff)
				}
			}
		})
	}
}

// FuzzHotRoute: whatever the request line, a request hotRoute takes is one
// the mux routes to the same handler with the same ID.
func FuzzHotRoute(f *testing.F) {
	for _, seed := range [][2]string{
		{"POST", "/v1/leases"}, {"DELETE", "/v1/leases/AbC-_9"}, {"DELETE", "/v1/leases/.."},
		{"DELETE", "/v1/leases/a%2Fb"}, {"DELETE", "/v1/leases/a;b"}, {"POST", "/v1/leases?x"},
		{"DELETE", "http://h/v1/leases/x"}, {"DELETE", "/v1/leases/%2e%2e"}, {"DELETE", "*"},
	} {
		f.Add(seed[0], seed[1])
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, method, target string) {
		got, r, ok := hotRouteOf(t, method, target)
		if !ok || got == (routeOf{}) {
			return
		}
		if want := muxRouteOf(ts.srv, r); want != got {
			t.Fatalf("%s %s: hotRoute %+v, the mux %+v", method, target, got, want)
		}
	})
}
