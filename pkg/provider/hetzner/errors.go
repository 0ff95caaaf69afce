package hetzner

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// kinds maps Hetzner Cloud's error codes (API reference, "Errors") to the
// kit's kinds. An unlisted code of a 4xx answer is permanent, of a 5xx
// transient.
var kinds = map[hcloud.ErrorCode]cloudkit.Kind{
	// No server of this type left in the location: the next server type.
	hcloud.ErrorCodeResourceUnavailable:   cloudkit.KindCapacity,
	hcloud.ErrorCodePlacementError:        cloudkit.KindCapacity,
	hcloud.ErrorCodeResourceLimitExceeded: cloudkit.KindQuota,
	hcloud.ErrorCodeRateLimitExceeded:     cloudkit.KindRateLimited,
	hcloud.ErrorCodeNotFound:              cloudkit.KindNotFound,
	// The server name is taken: an earlier create of the same key.
	hcloud.ErrorCodeUniquenessError: cloudkit.KindConflict,
	hcloud.ErrorCodeConflict:        cloudkit.KindTransient,
	hcloud.ErrorCodeLocked:          cloudkit.KindTransient,
	hcloud.ErrorCodeServerError:     cloudkit.KindTransient,
	hcloud.ErrorCodeBadGateway:      cloudkit.KindTransient,
	hcloud.ErrorCodeTimeout:         cloudkit.KindTransient,
	hcloud.ErrorCodeMaintenance:     cloudkit.KindTransient,
	hcloud.ErrorCodeServiceError:    cloudkit.KindTransient,
	"unavailable":                   cloudkit.KindTransient,
}

// specFields names the spec field behind a field of Hetzner's
// invalid_input answer, so the Proxy's condition points at what to fix.
var specFields = map[string]string{
	"server_type": "spec.hetzner.serverTypes",
	"image":       "spec.hetzner.image",
	"location":    "spec.hetzner.location",
	"firewalls":   "spec.hetzner.firewallIDs",
	"user_data":   "spec.cloudInit",
}

// classify marks err with its kit kind; a rate-limited answer carries when
// to call again (retryAfter). The SDK's error text is Hetzner's message and
// code, never the request's content.
func classify(err error, resp *hcloud.Response, now time.Time) error {
	status := 0
	if resp != nil && resp.Response != nil {
		status = resp.StatusCode
	}
	var apiErr hcloud.Error
	switch {
	case errors.As(err, &apiErr):
		kind, ok := kinds[apiErr.Code]
		switch {
		case kind == cloudkit.KindRateLimited:
			return cloudkit.RateLimited(err, retryAfter(resp, now))
		case ok:
			return cloudkit.Classify(kind, err)
		case apiErr.Code == hcloud.ErrorCodeUnauthorized || apiErr.Code == hcloud.ErrorCodeForbidden:
			return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (the operator's Hetzner Cloud token is invalid or read-only: it needs a Read & Write token of the project, docs/hetzner.md)", err))
		case apiErr.Code == hcloud.ErrorCodeInvalidInput:
			return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w%s", err, invalidFields(apiErr)))
		case status >= 500:
			return cloudkit.Classify(cloudkit.KindTransient, err)
		}
		return cloudkit.Classify(cloudkit.KindPermanent, err)
	case status == http.StatusTooManyRequests:
		return cloudkit.RateLimited(err, retryAfter(resp, now))
	case status >= 400 && status < 500:
		return cloudkit.Classify(cloudkit.KindPermanent, err)
	}
	return cloudkit.Classify(cloudkit.KindTransient, err) // 5xx, no answer, timeout
}

// invalidFields is " (check spec.hetzner.image, …)" for the fields an
// invalid_input answer names.
func invalidFields(apiErr hcloud.Error) string {
	details, ok := apiErr.Details.(hcloud.ErrorDetailsInvalidInput)
	if !ok {
		return ""
	}
	var fields []string
	for _, f := range details.Fields {
		if spec, ok := specFields[f.Name]; ok {
			fields = append(fields, spec)
		} else {
			fields = append(fields, f.Name)
		}
	}
	if len(fields) == 0 {
		return ""
	}
	return " (check " + strings.Join(fields, ", ") + ")"
}

// retryAfter is how long a rate-limited answer asks to wait
// (cloudkit.RetryAfter).
func retryAfter(resp *hcloud.Response, now time.Time) time.Duration {
	if resp == nil || resp.Response == nil {
		return 0
	}
	return cloudkit.RetryAfter(resp.Header, resp.Meta.Ratelimit.Reset, now)
}
