package gce

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
)

// classify marks err with its provider error class, from what Google said:
// the HTTP status and the reasons of a compute.Error, or the status and
// codes of a failed operation (operationError).
//
//   - quota: a reason saying quota exceeded, a rate limit, or a zone or
//     region out of resources (ZONE_RESOURCE_POOL_EXHAUSTED and kin), and
//     any 429. Retrying later, not now, is what helps.
//   - transient: resourceNotReady (another operation holds the resource),
//     5xx, and anything that is not a Google error (network, timeouts).
//   - permanent: the rest of 4xx: invalid requests, an image or machine type
//     or zone that does not exist, 401/403 (credentials or permission), an
//     API that is not enabled. Retrying the same request cannot help.
//
// Callers handle the 404s that mean "the instance is gone" and the 409 of an
// existing name themselves, before classify.
func classify(err error) error {
	if err == nil {
		return nil
	}
	code, reasons, ok := googleStatus(err)
	if !ok {
		return provider.Transient(err)
	}
	return provider.WithClass(errorClass(code, reasons), err)
}

// errorClass is the decision of classify.
func errorClass(code int, reasons []string) error {
	for _, r := range reasons {
		r = normalizeReason(r)
		switch {
		case strings.Contains(r, "quotaexceeded"), strings.Contains(r, "rateexceeded"),
			strings.Contains(r, "ratelimitexceeded"), strings.Contains(r, "resourcepoolexhausted"),
			r == "resourceexhausted", r == "stockout":
			return provider.ErrQuotaExceeded
		}
	}
	if code == http.StatusTooManyRequests {
		return provider.ErrQuotaExceeded
	}
	for _, r := range reasons {
		switch normalizeReason(r) {
		case "resourcenotready", "backenderror", "internalerror", "timeout", "deadlineexceeded", "unavailable":
			return provider.ErrTransient
		}
	}
	switch {
	case code >= 500:
		return provider.ErrTransient
	case code >= 400 && code != http.StatusConflict && code != http.StatusPreconditionFailed && code != http.StatusRequestTimeout:
		return provider.ErrPermanent
	case code == 0:
		// An operation error without an HTTP status: decide by its codes.
		for _, r := range reasons {
			switch normalizeReason(r) {
			case "resourcenotfound", "invalidfieldvalue", "invalidusage", "badrequest", "invalid",
				"notfound", "permissiondenied", "forbidden", "unsupportedoperation":
				return provider.ErrPermanent
			}
		}
	}
	return provider.ErrTransient
}

// normalizeReason folds "QUOTA_EXCEEDED" and "quotaExceeded" together.
func normalizeReason(r string) string {
	return strings.ToLower(strings.ReplaceAll(r, "_", ""))
}

// googleStatus extracts the HTTP status and reasons of a Google error.
func googleStatus(err error) (code int, reasons []string, ok bool) {
	if gerr, ok := compute.AsError(err); ok {
		return gerr.Code, gerr.Reasons, true
	}
	var operr *operationError
	if errors.As(err, &operr) {
		for _, item := range operr.errors {
			reasons = append(reasons, item.Code)
		}
		return operr.httpStatus, reasons, true
	}
	return 0, nil, false
}

// isNotFound says whether err is Google's 404.
func isNotFound(err error) bool { return googleCode(err) == http.StatusNotFound }

// isAlreadyExists says whether err is Google's 409 for an existing resource.
func isAlreadyExists(err error) bool {
	code, reasons, _ := googleStatus(err)
	if code != http.StatusConflict {
		return false
	}
	for _, r := range reasons {
		if normalizeReason(r) == "alreadyexists" {
			return true
		}
	}
	return len(reasons) == 0
}

func googleCode(err error) int {
	if gerr, ok := compute.AsError(err); ok {
		return gerr.Code
	}
	return 0
}

// operationError is a zone operation that finished with errors: the insert
// was accepted, then failed (an exhausted zone, a quota, a missing image).
type operationError struct {
	operation  string
	httpStatus int
	errors     []*compute.OperationErrorErrors
}

func newOperationError(op *compute.Operation) error {
	if op == nil || op.Error == nil || len(op.Error.Errors) == 0 {
		return nil
	}
	return &operationError{operation: op.Name, httpStatus: int(op.HttpErrorStatusCode), errors: op.Error.Errors}
}

func (e *operationError) Error() string {
	msgs := make([]string, 0, len(e.errors))
	for _, item := range e.errors {
		msgs = append(msgs, fmt.Sprintf("%s: %s", item.Code, item.Message))
	}
	return fmt.Sprintf("operation %s failed: %s", e.operation, strings.Join(msgs, "; "))
}

// redactedError hides a secret (the cloud-init) should an API echo it back in
// an error message, and keeps the error's chain for errors.Is/As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every occurrence of a secret in its message
// replaced, raw or escaped as in JSON or Go quoting: the user-data as
// "[user-data redacted]", the proxy's password as "[password redacted]".
// Short user-data is left alone (it would match innocent text); a password
// is always replaced, whatever its length.
func redact(err error, userData []byte, password string) error {
	const minUserData = 8
	if err == nil {
		return err
	}
	msg := err.Error()
	replace := func(secret, with string) {
		quoted := strconv.Quote(secret)
		jsonQuoted, _ := json.Marshal(secret)
		for _, form := range []string{secret, quoted[1 : len(quoted)-1], string(jsonQuoted[1 : len(jsonQuoted)-1])} {
			msg = strings.ReplaceAll(msg, form, with)
		}
	}
	if len(userData) >= minUserData {
		replace(string(userData), "[user-data redacted]")
	}
	if password != "" {
		replace(password, "[password redacted]")
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}
