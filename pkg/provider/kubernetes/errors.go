package kubernetes

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// classify wraps an API error with what was being done and its provider
// error class, so the controller knows how to retry:
//
//   - exceeded ResourceQuota → provider.Quota (retry on a fixed schedule);
//   - an invalid object, a bad request, a forbidden request (RBAC, a Pod
//     Security or quota constraint the Pod does not meet), a namespace being
//     deleted → provider.Permanent (retrying the same request cannot help);
//   - everything else (timeouts, throttling, conflicts, server errors, a
//     quota whose usage is not computed yet) → transient.
func classify(err error, format string, args ...any) error {
	wrapped := fmt.Errorf(format+": %w", append(args, err)...)
	switch {
	case apierrors.IsForbidden(err):
		switch quotaRefusal(err) {
		case quotaExceeded:
			return provider.Quota(wrapped)
		case quotaUsageUnknown:
			return provider.Transient(wrapped)
		}
		return provider.Permanent(wrapped)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsRequestEntityTooLargeError(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		return provider.Permanent(wrapped)
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return provider.Permanent(wrapped)
	default:
		return provider.Transient(wrapped)
	}
}

type quotaRefusalKind int

const (
	notQuota quotaRefusalKind = iota
	// quotaExceeded: the request would take usage above a ResourceQuota's hard limit.
	quotaExceeded
	// quotaUsageUnknown: a matching ResourceQuota has no usage computed yet
	// (just created; the quota controller fills it in within seconds).
	quotaUsageUnknown
)

// quotaRefusal tells which ResourceQuota refusal a Forbidden error is. The
// ResourceQuota admission plugin (k8s.io/apiserver/pkg/admission/plugin/
// resourcequota) reports every refusal as a plain 403 Forbidden whose message
// is the only distinction: no reason, no cause. So this is the one place
// that reads an API error's message; the phrases are the plugin's own:
//
//	pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1
//	pods "x" is forbidden: status unknown for quota: q, resources: pods
//	pods "x" is forbidden: failed quota: q: must specify limits.cpu for: proxy
//
// "failed quota" (the Pod lacks requests or limits the quota requires) is a
// configuration error, left to the caller as a plain Forbidden.
func quotaRefusal(err error) quotaRefusalKind {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return notQuota
	}
	msg := status.Status().Message
	switch {
	case strings.Contains(msg, "exceeded quota: "):
		return quotaExceeded
	case strings.Contains(msg, "status unknown for quota: "):
		return quotaUsageUnknown
	default:
		return notQuota
	}
}
