package server

import (
	"errors"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// The session call (DELETE /v1/sessions/{session}) that the gateway's
// callers use to move a session: its query and its handler.

// sessionQuery is DELETE /v1/sessions/{session}?namespace=&outcome=&domain=.
type sessionQuery struct {
	namespace string
	release   releaseQuery
}

func decodeSessionRelease(session, rawQuery string) (sessionQuery, error) {
	if err := validateText("session", session, maxSessionLen, true); err != nil {
		return sessionQuery{}, err
	}
	q, err := parseQuery(rawQuery, sessionParams...)
	if err != nil {
		return sessionQuery{}, err
	}
	if err := validateNamespace("namespace", q.get("namespace")); err != nil {
		return sessionQuery{}, err
	}
	r, err := releaseFrom(&q)
	if err != nil {
		return sessionQuery{}, err
	}
	return sessionQuery{namespace: q.get("namespace"), release: r}, nil
}

// releaseSession serves DELETE /v1/sessions/{session}: every live lease of
// the session (in the namespace scope given, as the acquire named it) is
// released with the outcome, and the session forgets its proxy, so that its
// next connection through the gateway gets another one. The caller needs
// delete on proxies/leases in the namespace of each lease's proxy. 204 even
// when the session holds nothing: the outcome is what the caller wanted.
func (s *Server) releaseSession(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	session := r.PathValue("session")
	q, err := decodeSessionRelease(session, r.URL.RawQuery)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if q.namespace != "" && !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbDelete, Namespace: q.namespace}) {
		return
	}
	leases := s.leases.SessionLeases(user.Identity(), q.namespace, session)
	authorized := map[string]bool{q.namespace: q.namespace != ""}
	for _, l := range leases {
		if ns := l.Proxy.Key.Namespace; !authorized[ns] {
			if !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbDelete, Namespace: ns}) {
				return
			}
			authorized[ns] = true
		}
	}
	for _, l := range leases {
		if err := s.leases.ReleaseAs(user.Identity(), l.ID, q.release.outcome, q.release.domain, store.Report{}); err != nil && !errors.Is(err, store.ErrUnknownLease) {
			s.writeStoreError(w, r, err)
			return
		}
	}
	s.leases.ForgetSession(user.Identity(), q.namespace, session)
	klog.FromContext(r.Context()).V(4).Info("Session released", "session", session, "namespace", q.namespace,
		"outcome", q.release.outcome, "leases", len(leases), "user", user.Name)
	w.WriteHeader(http.StatusNoContent)
}
