package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// readState reads a state body, one byte past the cap to tell a blob at
// the cap from one over it; false when it has answered.
func (s *Server) readState(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	blob, err := io.ReadAll(io.LimitReader(r.Body, store.MaxStateSize+1))
	if err != nil {
		var netErr net.Error
		s.writeStoreError(w, r, &bodyReadError{timeout: errors.As(err, &netErr) && netErr.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)})
		return nil, false
	}
	if len(blob) > store.MaxStateSize {
		w.Header().Set("Connection", "close") // the rest of the body is not read
		s.writeStoreError(w, r, &store.StateTooLargeError{Size: len(blob)})
		return nil, false
	}
	return blob, true
}

// putSessionState serves PUT /v1/sessions/{session}/state?namespace=&domain=:
// the body is kept for the proxy the session's lease holds (the gateway's
// session, whose lease ID a crawler never sees), for that lease's domain
// (domain, if given, must be it). 204; 404 when the session holds no lease.
func (s *Server) putSessionState(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	session := r.PathValue("session")
	if err := validateText("session", session, maxSessionLen, true); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	q, err := parseQuery(r.URL.RawQuery, "namespace", "domain")
	if err == nil {
		err = validateNamespace("namespace", q.get("namespace"))
	}
	var domain string
	if err == nil {
		domain, err = parseDomain("domain", q.get("domain")) // as acquire reads it
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbUpdate, Namespace: q.get("namespace")}) {
		return
	}
	blob, ok := s.readState(w, r)
	if !ok {
		return
	}
	if err := s.leases.PutSessionStateAs(user.Identity(), q.get("namespace"), session, domain, blob); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// putState serves PUT /v1/leases/{id}/state: the body (any bytes, up to
// MaxStateSize) is kept under the lease's proxy and domain, for the next
// grant of that proxy for that domain (sessionstate.go). An empty body
// drops what is kept. 204.
func (s *Server) putState(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if !s.authorizeLease(w, r, user, auth.VerbUpdate, id) {
		return
	}
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	blob, ok := s.readState(w, r)
	if !ok {
		return
	}
	if err := s.leases.PutStateAs(user.Identity(), id, blob); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
