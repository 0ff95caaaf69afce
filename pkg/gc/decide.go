package gc

import (
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
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

// proxyRecord is what the collector needs of a Proxy: its UID and the
// instance its status names, as recordedInstance spells it.
type proxyRecord struct {
	uid      types.UID
	instance string
}

// liveRead is what the API server said about the instance's Proxy: its
// record, or the error of the read.
type liveRead struct {
	proxyRecord
	err error
}

// recordedInstance is the instance p's status names, as a ProviderID
// ("aws://eu-west-1/i-…"); "" for none. An ID recorded before IDs named
// their provider is read as spec.provider's, as the controller reads it.
func recordedInstance(p *crawlv1alpha1.Proxy) string {
	id := p.Status.ProviderID
	if id == "" {
		return ""
	}
	if _, _, ok := provider.SplitProviderID(id); ok {
		return id
	}
	return provider.ProviderID(string(p.Spec.Provider), id)
}

func recordOf(p *crawlv1alpha1.Proxy) proxyRecord {
	return proxyRecord{uid: p.UID, instance: recordedInstance(p)}
}

// orphaned decides about an instance from its tags, the UIDs of the Proxies
// in the cache, and the live read of its Proxy (nil before one was made).
// It deletes only on proof: NotFound for that very Proxy, or that Proxy name
// holding another UID. It is pure.
func orphaned(tags map[string]string, cached map[types.UID]proxyRecord, live *liveRead) decision {
	uid := types.UID(tags[crawlv1alpha1.TagProxyUID])
	if uid == "" {
		return decision{actionKeep, "no proxy-uid tag"}
	}
	if _, ok := cached[uid]; ok {
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

// duplicate decides about an instance of a Proxy that exists: is it a
// second instance beside the one the Proxy's status names? That happens
// when a cloud launch whose answer was lost is retried at another place
// (another instance, not the same one), and nothing else would ever delete
// it. It deletes only on proof: a live read of the Proxy (same UID) naming
// another instance, and the instance older than grace, so that a launch in
// flight, whose status write is still to come, is never taken for one. An
// instance whose age the provider cannot tell is never a duplicate, nor is
// one of a Proxy that names no instance yet (its create adopts it). self
// is the instance as a ProviderID; named what the cache's copy of the
// Proxy names; live nil before a live read. It is pure.
func duplicate(self string, createdAt, now time.Time, grace time.Duration, uid types.UID, named string, live *liveRead) decision {
	switch {
	case createdAt.IsZero():
		return decision{actionKeep, "its provider does not tell its age"}
	case now.Sub(createdAt) < grace:
		return decision{actionKeep, fmt.Sprintf("younger than the duplicate grace period (%s): a launch may be in flight", grace)}
	case named == "" || named == self:
		return decision{actionKeep, "its Proxy names it or none"}
	case live == nil:
		return decision{actionConfirm, fmt.Sprintf("its Proxy names another instance (%s)", named)}
	case live.err != nil:
		return decision{actionKeep, fmt.Sprintf("cannot confirm that its Proxy names another instance: %v", live.err)}
	case live.uid != uid:
		return decision{actionKeep, "its Proxy was recreated; the orphan check collects it"}
	case live.instance == "" || live.instance == self:
		return decision{actionKeep, "its Proxy names it or none (the cache is behind)"}
	}
	return decision{actionDelete, fmt.Sprintf("a duplicate: its Proxy names instance %s", live.instance)}
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
