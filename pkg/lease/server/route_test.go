package server

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// routeOf is how a request is routed: the mux's pattern and the lease ID
// its handler is served with; empty for a 404/405 or an unclean path.
type routeOf struct {
	Pattern, ID string
}

// routeOfRequest parses a request head the way net/http does and asks the
// Server's mux, after the Handler's own check of the path.
func routeOfRequest(t *testing.T, s *Server, method, target string) (routeOf, bool) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
	if err != nil {
		return routeOf{}, false
	}
	if cleanPath(r.URL.Path) != r.URL.Path {
		return routeOf{}, true
	}
	_, pattern := s.mux.Handler(r)
	if pattern == "" {
		return routeOf{}, true
	}
	// The same pattern on a mux of the test's, to read the ID the mux
	// extracts (the server's own handlers do not show it).
	var got routeOf
	probe := http.NewServeMux()
	probe.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) { got = routeOf{Pattern: r.Pattern, ID: r.PathValue("id")} })
	probe.ServeHTTP(&headerRecorder{header: http.Header{}}, r)
	return got, true
}

// TestRoutes: every spelling of a lease call reaches the handler it names,
// with the ID it names, or none (the Handler answers 404/405 in JSON).
func TestRoutes(t *testing.T) {
	ts := newTestServer(t)
	id := ts.acquire(`{"holder":"w"}`).ID
	const (
		acquire = "POST /v1/leases"
		release = "DELETE /v1/leases/{id}"
		get     = "GET /v1/leases/{id}"
		renew   = "POST /v1/leases/{id}/renew"
	)
	tests := []struct {
		method, target string
		want           routeOf
	}{
		{"POST", "/v1/leases", routeOf{acquire, ""}},
		{"POST", "/v1/leases?wait=1s", routeOf{acquire, ""}},
		{"DELETE", "/v1/leases/" + id, routeOf{release, id}},
		{"DELETE", "/v1/leases/" + id + "?outcome=banned&domain=example.com", routeOf{release, id}},
		{"GET", "/v1/leases", routeOf{"GET /v1/leases", ""}},
		{"GET", "/v1/leases/" + id, routeOf{get, id}},
		{"POST", "/v1/leases/" + id + "/renew", routeOf{renew, id}},
		{"DELETE", "/v1/leases/%61", routeOf{release, "a"}},
		{"DELETE", "/v1/leases/a%2Fb", routeOf{release, "a/b"}},
		{"POST", "/v1/leases/", routeOf{}},
		{"DELETE", "/v1/leases/", routeOf{}},
		{"DELETE", "/v1/leases/..", routeOf{}},
		{"DELETE", "/v1/leases/.", routeOf{}},
		{"DELETE", "/v1/leases/a/b", routeOf{}},
		{"DELETE", "/v1/leases//a", routeOf{}},
		{"DELETE", "/v1//leases/a", routeOf{}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			got, ok := routeOfRequest(t, ts.srv, tt.method, tt.target)
			if !ok {
				t.Fatal("not a request")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("route (-want +got):\n%s", diff)
			}
		})
	}
}
