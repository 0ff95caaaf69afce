package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Error mapping: the API's error codes, and how a decoder's or the store's
// error becomes a status and a JSON error body.

// writeStoreError answers an error of a decoder or the store.
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		field       *store.FieldError
		tooLarge    *http.MaxBytesError
		readErr     *bodyReadError
		unavailable *store.UnavailableError
		siteBanning *store.SiteBanningError
		// stateTooLarge is checked before tooLarge: a state body is read
		// one byte past the cap, to say by how much.
		stateTooLarge *store.StateTooLargeError
	)
	switch {
	case errors.As(err, &field):
		writeError(w, http.StatusBadRequest, wire.CodeInvalid, err.Error(), field.Field)
	case errors.As(err, &stateTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, err.Error(), "state")
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit), "")
	case errors.As(err, &readErr) && readErr.timeout:
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, wire.CodeRequestTimeout, err.Error(), "")
	case errors.As(err, &readErr):
		writeError(w, http.StatusBadRequest, wire.CodeInvalid, err.Error(), "")
	case errors.Is(err, store.ErrTooManyLeases):
		writeError(w, http.StatusTooManyRequests, wire.CodeTooManyLeases, err.Error(), "")
	case errors.As(err, &unavailable) && errors.Is(err, store.ErrDomainLimited):
		// The caller asks too often, not the fleet too little: 429.
		setRetryAfter(w, unavailable.RetryAfter)
		// Its reason says which: the budget is used up, or the namespace
		// has no room for another domain's (ErrDomainBudgetsFull).
		writeError(w, http.StatusTooManyRequests, wire.CodeDomainLimited, unavailable.Reason.Error()+"; retry after Retry-After, or acquire with wait", "")
	case errors.As(err, &siteBanning):
		// The site refuses the fleet, not the fleet the caller: 429, and
		// no wait helps before Retry-After.
		setRetryAfter(w, siteBanning.RetryAfter)
		writeError(w, http.StatusTooManyRequests, wire.CodeSiteBanning, err.Error()+"; retry after Retry-After, or crawl other sites meanwhile", "")
	case errors.Is(err, store.ErrUnknownLease):
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such lease: unknown, released or expired; acquire a new one", "")
	case errors.Is(err, store.ErrRevoked):
		writeError(w, http.StatusGone, wire.CodeRevoked, err.Error()+"; acquire a new one", "")
	case errors.Is(err, store.ErrSuperseded):
		writeError(w, http.StatusConflict, wire.CodeSuperseded, err.Error()+"; acquire a new one", "")
	case errors.As(err, &unavailable):
		setRetryAfter(w, unavailable.RetryAfter)
		code := wire.CodeNoneFree
		switch {
		case errors.Is(err, store.ErrCoolingDown):
			code = wire.CodeCoolingDown
		case errors.Is(err, store.ErrRecovering):
			code = wire.CodeRecovering
		}
		writeError(w, http.StatusServiceUnavailable, code, unavailable.Reason.Error(), "")
	case errors.Is(err, store.ErrNotLeader):
		setRetryAfter(w, time.Second)
		writeError(w, http.StatusServiceUnavailable, wire.CodeNotLeader, err.Error(), "")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errHorizon):
		if errors.Is(err, errHorizon) {
			klog.FromContext(r.Context()).Error(err, "Extending the lease horizon")
		}
		setRetryAfter(w, time.Second)
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "the lease API cannot answer now; retry", "")
	default:
		klog.FromContext(r.Context()).Error(err, "Lease API call failed", "method", r.Method, "path", r.URL.Path)
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, "internal error", "")
	}
}

func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(d.Seconds())))))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// The client may be gone; there is nobody to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message, field string) {
	writeJSON(w, status, wire.Error{Error: wire.ErrorBody{Code: code, Message: message, Field: field}})
}
