package gc

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// action is what a round does with one instance.
type action string

const (
	actionKeep action = "keep"
	// actionConfirm: the cache does not vouch for the instance; read its
	// Proxy from the API server and decide again.
	actionConfirm action = "confirm"
	actionDelete  action = "delete"
)

// decision is an action and the reason for it, for logs and events.
type decision struct {
	action action
	reason string
}

// liveRead is what the API server said about the instance's Proxy: its UID,
// or the error of the read.
type liveRead struct {
	uid types.UID
	err error
}

// orphaned decides about an instance from its tags, the UIDs of the Proxies
// in the cache, and the live read of its Proxy (nil before one was made).
// It deletes only on proof: NotFound for that very Proxy, or that Proxy name
// holding another UID. It is pure.
func orphaned(tags map[string]string, cached sets.Set[types.UID], live *liveRead) decision {
	uid := types.UID(tags[crawlv1alpha1.TagProxyUID])
	if uid == "" {
		return decision{actionKeep, "no proxy-uid tag"}
	}
	if cached.Has(uid) {
		return decision{actionKeep, "its Proxy is in the cache"}
	}
	ns, name := tags[crawlv1alpha1.TagProxyNamespace], tags[crawlv1alpha1.TagProxyName]
	if ns == "" || name == "" {
		return decision{actionKeep, "no proxy-namespace/proxy-name tags to confirm it by"}
	}
	if live == nil {
		return decision{actionConfirm, "its Proxy is not in the cache"}
	}
	switch {
	case live.err == nil && live.uid == uid:
		return decision{actionKeep, "its Proxy exists (the cache is behind)"}
	case live.err == nil:
		return decision{actionDelete, fmt.Sprintf("Proxy %s/%s was recreated (uid %s, the instance's is %s)", ns, name, live.uid, uid)}
	case notFoundFor(live.err, name):
		return decision{actionDelete, fmt.Sprintf("Proxy %s/%s (uid %s) no longer exists", ns, name, uid)}
	default:
		return decision{actionKeep, fmt.Sprintf("cannot confirm that Proxy %s/%s is gone: %v", ns, name, live.err)}
	}
}

// notFoundFor is true only for the API server's own NotFound about the
// Proxy name: a Status naming that object of our resource. A 404 that
// names no object (a resource that is not served), or one that client-go
// made up from a body that was no Status (a "404 page not found" from
// whatever answered, say while the CRD is being reinstalled), proves
// nothing about the Proxy.
func notFoundFor(err error, name string) bool {
	var apiStatus apierrors.APIStatus
	if !errors.As(err, &apiStatus) {
		return false
	}
	status := apiStatus.Status()
	details := status.Details
	if status.Reason != metav1.StatusReasonNotFound || details == nil ||
		details.Name != name || details.Kind != proxiesResource || details.Group != crawlv1alpha1.GroupName {
		return false
	}
	for _, cause := range details.Causes {
		if cause.Type == metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return true
}

// proxiesResource is the resource name the API server puts in the details
// of a NotFound about a Proxy.
const proxiesResource = "proxies"
