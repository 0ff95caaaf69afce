package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// The handlers of the /v1 calls: decode, authorize, call the store (within
// the persisted horizon), answer.

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	req, err := decodeAcquire(s.body(r, w))
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	req.Owner = user.Identity()
	if !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbCreate, Namespace: req.Namespace}) {
		return
	}
	l, err := s.acquireWithinHorizon(r.Context(), req)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	var creds *proxyaccess.Credentials
	if s.credentials != nil {
		ctx := r.Context()
		if actingFor(r) {
			ctx = auth.WithActingFor(ctx)
		}
		if creds, err = s.credentials(ctx, l); err != nil {
			// A lease without the credentials it needs is useless: give it
			// back. Not a session's: the acquire may have joined the
			// session's live lease, which its other calls still hold; its
			// TTL ends it.
			given := "the session's lease ends with its TTL"
			if req.Session == "" {
				given = "the lease was returned"
				if relErr := s.leases.ReleaseAs(req.Owner, l.ID, store.OutcomeError, "", store.Report{}); relErr != nil && !errors.Is(relErr, store.ErrUnknownLease) {
					klog.FromContext(r.Context()).Error(relErr, "Returning a lease whose credentials are unavailable", "proxy", l.Proxy.Key)
				}
			}
			if errors.Is(err, auth.ErrGatewayOnly) {
				writeError(w, http.StatusForbidden, wire.CodeGatewayOnly, fmt.Sprintf(
					"proxy %s is gateway-only (label %s): its credentials go only to the gateway tier; crawl through the gateway, or leave such proxies out with the selector %s!=true; %s",
					l.Proxy.Key, crawlv1alpha1.GatewayOnlyLabel, crawlv1alpha1.GatewayOnlyLabel, given), "")
				return
			}
			klog.FromContext(r.Context()).Error(err, "Proxy credentials unavailable", "proxy", l.Proxy.Key)
			writeError(w, http.StatusInternalServerError, wire.CodeCredentialsUnavailable,
				fmt.Sprintf("the credentials of proxy %s are unavailable; %s", l.Proxy.Key, given), "")
			return
		}
	}
	// Checked first: the arguments alone would allocate on every grant.
	if logger := klog.FromContext(r.Context()).V(4); logger.Enabled() {
		logger.Info("Lease granted", "proxy", l.Proxy.Key, "holder", l.Holder, "user", user.Name, "expiresAt", l.ExpiresAt)
	}
	w.Header().Set("Location", "/v1/leases/"+l.ID)
	writeJSON(w, http.StatusCreated, leaseWireFrom(l, creds))
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	req, err := decodeRenew(s.body(r, w))
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if !s.authorizeLease(w, r, user, auth.VerbUpdate, id) {
		return
	}
	// The report counts as part of the renewal: only if it succeeds.
	l, err := s.renewWithinHorizon(r.Context(), user.Identity(), id, req.ttl, req.report)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseWireFrom(l, s.renewedCredentials(r, l)))
}

// renewedCredentials are a renewed lease's fresh credentials when its
// proxy checks lease credentials (their end moved with the lease's); nil
// otherwise: a proxy's own credentials are handed out with the grant only.
// A failure to sign leaves the holder its earlier credentials, valid until
// their end.
func (s *Server) renewedCredentials(r *http.Request, l store.Lease) *proxyaccess.Credentials {
	if s.credentials == nil {
		return nil
	}
	ctx := r.Context()
	if actingFor(r) {
		ctx = auth.WithActingFor(ctx)
	}
	creds, err := s.credentials(ctx, l)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Signing a renewed lease's credentials", "proxy", l.Proxy.Key)
		return nil
	}
	if creds == nil || !creds.LeaseBound {
		return nil
	}
	return creds
}

// actingFor reports whether the call is made for a user by a caller whose
// act-for permission authenticate checked (the gateway tier).
func actingFor(r *http.Request) bool { return r.Header.Get(wire.HeaderActForUser) != "" }

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	q, err := decodeRelease(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorizeLease(w, r, user, auth.VerbDelete, id) {
		return
	}
	err = s.leases.ReleaseAs(user.Identity(), id, q.outcome, q.domain, store.Report{TransferredBytes: q.transferred})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	_, err := parseQuery(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if !s.authorizeLease(w, r, user, auth.VerbGet, id) {
		return
	}
	l, err := s.leases.GetAs(user.Identity(), id)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseWireFrom(l, nil))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	f, err := decodeList(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbList, Namespace: f.Namespace}) {
		return
	}
	leases, err := s.leases.List(f)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	items := make([]wire.Lease, 0, len(leases))
	for _, l := range leases {
		items = append(items, leaseWireFrom(l, nil))
	}
	writeJSON(w, http.StatusOK, wire.List[wire.Lease]{Items: items})
}

func (s *Server) proxies(w http.ResponseWriter, r *http.Request) {
	user, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	q, err := decodeProxies(r.URL.RawQuery)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if !s.authorize(w, r, user, auth.Attributes{Verb: auth.VerbList, Namespace: q.namespace}) {
		return
	}
	proxies := s.leases.Proxies(q.namespace, q.selector)
	items := make([]wire.Proxy, 0, len(proxies))
	for _, p := range proxies {
		items = append(items, wire.Proxy{
			Namespace: p.Key.Namespace, Name: p.Key.Name, URL: p.URL, Labels: p.Labels,
			LatencyMillis: p.LatencyMillis, MaxLeases: p.MaxLeases, FreeLeases: p.FreeLeases, ExitCountry: p.ExitCountry,
		})
	}
	writeJSON(w, http.StatusOK, wire.List[wire.Proxy]{Items: items})
}

// acquireWithinHorizon acquires, extending the persisted horizon when the
// grant needs it, within the request's wait.
func (s *Server) acquireWithinHorizon(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	// Without a wait there is nothing to count down: no clock read.
	var deadline time.Time
	if req.Wait > 0 {
		deadline = s.clock.Now().Add(req.Wait)
	}
	for {
		l, err := s.leases.Acquire(ctx, req)
		need, beyond := s.beyondHorizon(ctx, l, err)
		if !beyond {
			return l, err
		}
		if err := s.horizon.ensure(ctx, need); err != nil {
			return store.Lease{}, err
		}
		if req.Wait > 0 {
			req.Wait = max(0, deadline.Sub(s.clock.Now()))
		}
	}
}

func (s *Server) renewWithinHorizon(ctx context.Context, owner, id string, ttl time.Duration, report store.Report) (store.Lease, error) {
	for {
		l, err := s.leases.RenewAs(owner, id, ttl, report)
		need, beyond := s.beyondHorizon(ctx, l, err)
		if !beyond {
			return l, err
		}
		if err := s.horizon.ensure(ctx, need); err != nil {
			return store.Lease{}, err
		}
	}
}

// beyondHorizon is what to do with the answer of a grant or renewal: beyond
// is true when it was refused for the persisted horizon, which must first
// reach need; else the answer stands, and a granted lease keeps the horizon
// ahead of it.
func (s *Server) beyondHorizon(ctx context.Context, l store.Lease, err error) (need time.Time, beyond bool) {
	if s.horizon == nil {
		return time.Time{}, false
	}
	if err == nil {
		s.horizon.keepAhead(ctx, l.ExpiresAt)
		return time.Time{}, false
	}
	// Only a refusal reaches errors.As, whose target would escape to the heap.
	var horizonErr *store.HorizonError
	if !errors.As(err, &horizonErr) {
		return time.Time{}, false
	}
	return horizonErr.Need, true
}

// leaseWireFrom is a lease as the API writes it (package wire).
func leaseWireFrom(l store.Lease, creds *proxyaccess.Credentials) wire.Lease {
	out := wire.Lease{
		ID:     l.ID,
		Holder: l.Holder,
		Proxy: wire.ProxyRef{
			Namespace: l.Proxy.Key.Namespace, Name: l.Proxy.Key.Name, URL: l.Proxy.URL, LatencyMillis: l.Proxy.LatencyMillis,
			Pool: l.Proxy.Pool,
		},
		Session:   l.Session,
		Domain:    l.Domain,
		State:     l.State,
		TTL:       l.TTL.String(),
		GrantedAt: l.GrantedAt.UTC(),
		ExpiresAt: l.ExpiresAt.UTC(),
	}
	if creds != nil {
		out.Credentials = &wire.Credentials{Username: creds.Username, Password: creds.Password}
	}
	return out
}
