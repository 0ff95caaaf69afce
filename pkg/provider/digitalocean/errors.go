package digitalocean

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// DigitalOcean's error bodies carry an id (unprocessable_entity,
// too_many_requests, forbidden, not_found, ...) and a message; godo keeps
// the message, so the kinds of a 422 are told by it (API reference,
// "Droplets: Create a New Droplet" and "Errors").
var (
	// No droplet of this size left in the region: the next size.
	capacityMessages = []string{"is not available in this region", "size is not available", "not available in the selected region"}
	// The account's droplet limit.
	quotaMessages = []string{"droplet limit", "exceed your droplet"}
)

// specFields names the spec field behind a word of a 422's message
// ("You specified an invalid size for Droplet creation."), so the
// Proxy's condition points at what to fix.
var specFields = []struct{ word, field string }{
	{"size", "spec.digitalocean.sizes"},
	{"image", "spec.digitalocean.image"},
	{"region", "spec.digitalocean.region"},
	{"vpc", "spec.digitalocean.vpcUUID"},
	{"tag", "spec.digitalocean.tags"},
	{"user data", "spec.cloudInit"},
	{"user_data", "spec.cloudInit"},
}

// classify marks err with its kit kind; a rate-limited answer carries when
// to call again. godo's error text is DigitalOcean's message with the
// method and URL, never the request's body.
func classify(err error, resp *godo.Response, now time.Time) error {
	var apiErr *godo.ErrorResponse
	if !errors.As(err, &apiErr) || apiErr.Response == nil {
		return cloudkit.Classify(cloudkit.KindTransient, err) // no answer, timeout
	}
	message := strings.ToLower(apiErr.Message)
	switch status := apiErr.Response.StatusCode; {
	case status == http.StatusTooManyRequests:
		return cloudkit.RateLimited(err, retryAfter(resp, now))
	case status == http.StatusUnprocessableEntity && containsAny(message, capacityMessages):
		return cloudkit.Classify(cloudkit.KindCapacity, err)
	case status == http.StatusUnprocessableEntity && containsAny(message, quotaMessages):
		return cloudkit.Classify(cloudkit.KindQuota, err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (the operator's DigitalOcean token is invalid or lacks a scope: docs/digitalocean.md lists the ones it needs)", err))
	case status == http.StatusNotFound:
		return cloudkit.Classify(cloudkit.KindNotFound, err)
	case status >= 500:
		return cloudkit.Classify(cloudkit.KindTransient, err)
	case status == http.StatusUnprocessableEntity || status == http.StatusBadRequest:
		for _, f := range specFields {
			if strings.Contains(message, f.word) {
				return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (check %s)", err, f.field))
			}
		}
	}
	return cloudkit.Classify(cloudkit.KindPermanent, err)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// retryAfter is how long a rate-limited answer asks to wait
// (cloudkit.RetryAfter).
func retryAfter(resp *godo.Response, now time.Time) time.Duration {
	if resp == nil || resp.Response == nil {
		return 0
	}
	return cloudkit.RetryAfter(resp.Header, resp.Rate.Reset.Time, now)
}
