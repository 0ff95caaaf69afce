package server

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Routing: the API's routes on the standard library's ServeMux, and what
// the Handler answers before the mux (oversized heads, unclean paths) and
// instead of it (404 and 405 in JSON).

// routes registers every endpoint (docs/api.md) on the mux.
func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/leases", s.leaderOnly(s.acquire))
	s.mux.HandleFunc("POST /v1/leases/{id}/renew", s.leaderOnly(s.renew))
	s.mux.HandleFunc("DELETE /v1/leases/{id}", s.leaderOnly(s.release))
	s.mux.HandleFunc("PUT /v1/leases/{id}/state", s.leaderOnly(s.putState)) // sessionstate_handler.go
	s.mux.HandleFunc("GET /v1/leases", s.leaderOnly(s.list))
	s.mux.HandleFunc("GET /v1/leases/{id}", s.leaderOnly(s.get))
	s.mux.HandleFunc("GET /v1/proxies", s.leaderOnly(s.proxies))
	s.mux.HandleFunc("DELETE /v1/sessions/{session}", s.leaderOnly(s.releaseSession)) // sessions.go
	s.mux.HandleFunc("PUT /v1/sessions/{session}/state", s.leaderOnly(s.putSessionState))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		// Fenced, it is unready too, so that the Service stops routing
		// here before a standby leads.
		if s.replicated != nil && !s.replicated.Ready() || s.replicated == nil && (!s.leading.Load() || s.store.Fenced()) {
			writeNotLeading(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "leading"})
	})
}

// HandleFunc adds a route beside the API on its port (the dashboard's
// /ui/, pkg/dashboard): it is served on every replica, leading or not, and
// does its own authentication. Call it before Serve.
func (s *Server) HandleFunc(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, h)
}

// Handler serves the API; 404 and 405 are answered in JSON like every error.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headBytes(r) > maxHeaderBytes {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestHeaderFieldsTooLarge, wire.CodeHeadersTooLarge, fmt.Sprintf("the request line and headers are larger than %d bytes", maxHeaderBytes), "")
			return
		}
		if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
			// The mux would redirect; the API has one spelling per endpoint.
			writeError(w, http.StatusNotFound, wire.CodeNotFound, fmt.Sprintf("no such endpoint: %s (the API does not redirect: use %s)", r.URL.Path, clean), "")
			return
		}
		if _, pattern := s.mux.Handler(r); pattern == "" {
			s.noRoute(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

func (s *Server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.leading.Load() {
			writeNotLeading(w)
			return
		}
		if s.replicated != nil && s.replicated.Synced != nil && !s.replicated.Synced() {
			writeNotSynced(w)
			return
		}
		h(w, r)
	}
}

func writeNotLeading(w http.ResponseWriter) {
	setRetryAfter(w, time.Second)
	writeError(w, http.StatusServiceUnavailable, wire.CodeNotLeader, "this replica is not the leader of the lease API: retry through the Service, which routes to the leader", "")
}

func writeNotSynced(w http.ResponseWriter) {
	setRetryAfter(w, time.Second)
	writeError(w, http.StatusServiceUnavailable, wire.CodeNotLeader, "this replica is starting: it has not yet listed the Proxies and Secrets a lease call reads; retry through the Service, which routes to ready replicas", "")
}

// noRoute answers what the mux would answer with 404 or 405, in JSON.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path), "")
	case http.StatusNotFound:
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such endpoint: "+r.URL.Path, "")
	default:
		// Anything else the mux would say (a redirect) is a 404 here too.
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such endpoint: "+r.URL.Path, "")
	}
}

// cleanPath is the path net/http's mux would redirect to: no ".", "..",
// or doubled slashes.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// headBytes approximates the size of a request's head as net/http counts
// it: the request line and every header line.
func headBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + len(r.Host)
}

// headerRecorder keeps the status and headers of a response, not its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}

func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}
