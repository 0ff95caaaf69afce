package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// What every handler does with a request before the store: read its body
// within the limit, and authenticate and authorize its caller.

// body is the request body within the size limit. A declared length
// beyond the limit is refused before anything is read, so that a client
// sending "Expect: 100-continue" gets no 100 Continue before its 413.
func (s *Server) body(r *http.Request, w http.ResponseWriter) io.Reader {
	if r.ContentLength > s.maxBody {
		return errReader{&http.MaxBytesError{Limit: s.maxBody}}
	}
	return http.MaxBytesReader(w, r.Body, s.maxBody)
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// noBody refuses a body on a call that takes none (DELETE and GET), looking
// no further than its declared length or first byte.
func noBody(r *http.Request) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength < 0 {
		// Chunked: look at the first byte. A declared length is refused
		// without reading (and without a 100 Continue).
		var b [1]byte
		if n, _ := io.ReadFull(r.Body, b[:]); n == 0 {
			return nil
		}
	}
	return &store.FieldError{Message: r.Method + " takes no request body (release takes outcome and domain as query parameters)"}
}

// bearerToken is the token of an "Authorization: Bearer" header, "" if none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (auth.User, bool) {
	ctx := r.Context()
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ctx = auth.WithClientAddr(ctx, host)
	}
	user, err := s.authn.Authenticate(ctx, bearerToken(r))
	switch {
	case errors.Is(err, auth.ErrReviewBudget):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, wire.CodeAuthUnavailable, "too many new bearer tokens to review now; retry", "")
		return auth.User{}, false
	case errors.Is(err, auth.ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator lease API"`)
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "a valid bearer token is required: "+err.Error(), "")
		return auth.User{}, false
	case err != nil:
		klog.FromContext(r.Context()).Error(err, "Authenticating a lease API call")
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, wire.CodeAuthUnavailable, "authentication is unavailable; retry", "")
		return auth.User{}, false
	}
	return s.actFor(w, r, user)
}

// actFor returns the user a call is made for: the caller itself, or the
// user its act-for headers name when the caller holds the act-for
// permission (the gateway tier). Such a call is then authorized as that
// user, so a gateway can never do more than the user could.
func (s *Server) actFor(w http.ResponseWriter, r *http.Request, caller auth.User) (auth.User, bool) {
	h := r.Header
	name, uid, groups := h.Get(wire.HeaderActForUser), h.Get(wire.HeaderActForUID), h.Values(wire.HeaderActForGroup)
	if name == "" && uid == "" && len(groups) == 0 {
		return caller, true
	}
	if name == "" {
		writeError(w, http.StatusBadRequest, wire.CodeInvalid, wire.HeaderActForUser+" is required with the other act-for headers", wire.HeaderActForUser)
		return auth.User{}, false
	}
	if !s.authorize(w, r, caller, auth.Attributes{Verb: auth.VerbActFor}) {
		return auth.User{}, false
	}
	return auth.User{Name: name, UID: uid, Groups: groups}, true
}

// authorizeLease authorizes a call on one lease in the namespace of its
// proxy; an ID that is not one of ours (or is another owner's) is 404.
func (s *Server) authorizeLease(w http.ResponseWriter, r *http.Request, user auth.User, verb, id string) bool {
	ns, err := s.leases.LeaseNamespace(user.Identity(), id)
	if err != nil {
		s.writeStoreError(w, r, err)
		return false
	}
	return s.authorize(w, r, user, auth.Attributes{Verb: verb, Namespace: ns})
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, user auth.User, attrs auth.Attributes) bool {
	allowed, reason, err := s.authz.Authorize(r.Context(), user, attrs)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Authorizing a lease API call", "user", user.Name, "verb", attrs.Verb, "namespace", attrs.Namespace)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, wire.CodeAuthUnavailable, "authorization is unavailable; retry", "")
		return false
	}
	if !allowed {
		where := "proxies/leases (crawl.proxyfleet.io) in namespace " + attrs.Namespace
		switch {
		case attrs.Verb == auth.VerbActFor:
			where = auth.ActForResource + " (" + auth.ActForGroup + ")"
		case attrs.Namespace == "":
			where = "proxies/leases (crawl.proxyfleet.io) across all namespaces"
		}
		msg := fmt.Sprintf("user %q may not %s %s", user.Name, attrs.Verb, where)
		if reason != "" {
			msg += ": " + reason
		}
		writeError(w, http.StatusForbidden, wire.CodeForbidden, msg, "")
		return false
	}
	return true
}
