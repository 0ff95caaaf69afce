package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// The EC2 error codes the provider decides on (EC2 API reference, "Error
// codes"). Anything else a client error (Client fault) is permanent, and a
// server error transient.
var (
	// capacityCodes move a create on to the next instance type or subnet;
	// when every place fails with one, the create is a quota error: EC2 may
	// have capacity again later.
	capacityCodes = map[string]bool{
		"InsufficientInstanceCapacity":      true,
		"InsufficientFreeAddressesInSubnet": true,
		"Unsupported":                       true,
	}
	quotaCodes = map[string]bool{
		"InstanceLimitExceeded":                true,
		"VcpuLimitExceeded":                    true,
		"MaxSpotInstanceCountExceeded":         true,
		"SpotMaxPriceTooLow":                   true,
		"InsufficientInstanceCapacity":         true,
		"InsufficientFreeAddressesInSubnet":    true,
		"InsufficientReservedInstanceCapacity": true,
	}
	// transientCodes are client-fault codes worth retrying: throttling the
	// SDK gave up on, and the eventual consistency of new resources.
	transientCodes = map[string]bool{
		"RequestLimitExceeded":         true,
		"Throttling":                   true,
		"InvalidInstanceID.NotFound":   true,
		"IncorrectInstanceState":       true,
		"DependencyViolation":          true,
		"IdempotentInstanceTerminated": true,
		"InternalError":                true,
		"InternalFailure":              true,
		"ServiceUnavailable":           true,
		"Unavailable":                  true,
	}
)

// errorCode is the EC2 error code of err, "" when it is not an API error.
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// isCapacityError: this place has no room, another may.
func isCapacityError(err error) bool { return capacityCodes[errorCode(err)] }

// isNotFound: the instance ID is unknown to EC2 (or not yet known).
func isNotFound(err error) bool {
	code := errorCode(err)
	return code == "InvalidInstanceID.NotFound" || code == "InvalidInstanceID.Malformed"
}

// classify wraps err with the class of its EC2 error code. The SDK's error
// text names the operation and the code, and never the request's content.
func classify(err error) error {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return provider.Transient(err) // no answer: network, timeout
	}
	code := apiErr.ErrorCode()
	switch {
	case quotaCodes[code]:
		return provider.Quota(err)
	case transientCodes[code]:
		return provider.Transient(err)
	case strings.HasPrefix(code, "Unauthorized") || code == "AuthFailure" || code == "OptInRequired" || code == "Blocked":
		return provider.Permanent(fmt.Errorf("%w (the operator's AWS identity lacks a permission docs/aws.md lists, or the account cannot use EC2 here)", err))
	case apiErr.ErrorFault() == smithy.FaultServer:
		return provider.Transient(err)
	}
	return provider.Permanent(err)
}
