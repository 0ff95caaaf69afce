package operator

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/klog/v2"
)

// Backoff between attempts of a call the operator cannot go on without.
const (
	firstAPIRetry = 100 * time.Millisecond
	maxAPIRetry   = 5 * time.Second
)

// untilAPIAnswers calls fn until it succeeds, fails in a way retrying cannot
// fix, or ctx ends. The operator's own start-up calls (the lease ID key, the
// GCE credentials, the leader label) go through it, so that an API server
// that is restarting or not up yet delays the operator instead of killing
// it. A wrong key, a missing Secret or a denied call still fails at once.
// When ctx ends it returns ctx's error.
func untilAPIAnswers(ctx context.Context, what string, fn func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	backoff := firstAPIRetry
	for {
		err := fn(ctx)
		if err == nil || !transientAPIError(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logger.Error(err, "Kubernetes API unavailable; retrying", "call", what, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, maxAPIRetry)
	}
}

// transientAPIError reports whether err says the API server was unreachable,
// overloaded or restarting (worth another try), as opposed to an answer
// that a retry would only repeat (not found, forbidden, invalid) or a
// misconfiguration (a TLS failure, a bad key).
func transientAPIError(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError ||
			apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
