package azure

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Azure Resource Manager's error codes ("Troubleshoot common Azure
// deployment errors"; the compute codes of "Troubleshoot allocation
// failures"), synchronous or of a failed long-running operation alike.
var (
	// No room for this size here now: the next size.
	capacityCodes = []string{"SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed",
		"OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest"}
	// The subscription's quota: OperationNotAllowed names the quota in its
	// message ("Operation could not be completed as it results in
	// exceeding approved standardBSFamily Cores quota").
	quotaCodes = []string{"QuotaExceeded", "PublicIPCountLimitReached"}
	// The operator's role lacks an action.
	permissionCodes = []string{"AuthorizationFailed", "LinkedAuthorizationFailed", "InvalidAuthenticationToken"}
	// Another operation holds the resource, or Azure asks for a retry.
	transientCodes = []string{"AnotherOperationInProgress", "RetryableError", "OperationPreempted", "Conflict"}
)

// specFields names the spec field behind a word of an invalid request's
// code or message, so the Proxy's condition points at what to fix.
var specFields = []struct{ word, field string }{
	{"vmsize", "spec.azure.vmSizes"},
	{"image", "spec.azure.image"},
	{"subnet", "spec.azure.subnetID"},
	{"location", "spec.azure.location"},
	{"customdata", "spec.cloudInit"},
	{"securityrule", "spec.azure.allowFrom"},
}

// classify marks err with its kit kind. The text of an *azcore.ResponseError
// is Azure's code and message with the method and URL, never the request's
// body.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return cloudkit.Classify(cloudkit.KindTransient, err) // no answer, timeout
	}
	code, text := re.ErrorCode, strings.ToLower(err.Error())
	switch status := re.StatusCode; {
	case status == http.StatusTooManyRequests:
		return cloudkit.RateLimited(err, 0) // every attempt the gate allowed got a 429
	case oneOf(code, capacityCodes):
		return cloudkit.Classify(cloudkit.KindCapacity, err)
	case oneOf(code, quotaCodes) || (code == "OperationNotAllowed" && strings.Contains(text, "quota")):
		return cloudkit.Classify(cloudkit.KindQuota, err)
	case oneOf(code, permissionCodes) || status == http.StatusUnauthorized || status == http.StatusForbidden:
		return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (the operator's Azure identity lacks a permission: docs/azure.md lists the role it needs)", err))
	case strings.HasSuffix(code, "ImageNotFound"):
		return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (check spec.azure.image)", err))
	case code == "ResourceGroupNotFound":
		return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (check --azure-resource-group)", err))
	case status == http.StatusNotFound || code == "ResourceNotFound" || code == "NotFound":
		return cloudkit.Classify(cloudkit.KindNotFound, err)
	case status >= 500 || oneOf(code, transientCodes):
		return cloudkit.Classify(cloudkit.KindTransient, err)
	case status == http.StatusConflict:
		return cloudkit.Classify(cloudkit.KindConflict, err)
	}
	for _, f := range specFields {
		if strings.Contains(strings.ToLower(code), f.word) || strings.Contains(text, f.word) {
			return cloudkit.Classify(cloudkit.KindPermanent, fmt.Errorf("%w (check %s)", err, f.field))
		}
	}
	return cloudkit.Classify(cloudkit.KindPermanent, err)
}

// errorCode is Azure's code of err, "" if it has none.
func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

func oneOf(code string, codes []string) bool {
	for _, c := range codes {
		if strings.EqualFold(code, c) {
			return true
		}
	}
	return false
}
