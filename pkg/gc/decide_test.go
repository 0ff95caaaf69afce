package gc

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

const (
	uidA types.UID = "aaaaaaaa-0000-4000-8000-000000000001"
	uidB types.UID = "bbbbbbbb-0000-4000-8000-000000000002"
)

var proxiesGR = schema.GroupResource{Group: crawlv1alpha1.GroupName, Resource: "proxies"}

// tagsOf builds instance tags; modify removes or changes some.
func tagsOf(uid types.UID, modify ...func(map[string]string)) map[string]string {
	tags := map[string]string{
		crawlv1alpha1.TagManagedBy:      crawlv1alpha1.ManagedByValue,
		crawlv1alpha1.TagProxyUID:       string(uid),
		crawlv1alpha1.TagProxyNamespace: "crawl",
		crawlv1alpha1.TagProxyName:      "p1",
	}
	for _, m := range modify {
		m(tags)
	}
	return tags
}

func without(key string) func(map[string]string) {
	return func(tags map[string]string) { delete(tags, key) }
}

func TestOrphaned(t *testing.T) {
	notServed := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{},
	}}
	tests := map[string]struct {
		tags   map[string]string
		cached []types.UID
		live   *liveRead
		want   decision
	}{
		"no proxy-uid tag: never touched": {
			tags: tagsOf("", without(crawlv1alpha1.TagProxyUID)),
			want: decision{actionKeep, "no proxy-uid tag"},
		},
		"empty proxy-uid tag: never touched, even with a live NotFound": {
			tags: tagsOf(""),
			live: &liveRead{err: apierrors.NewNotFound(proxiesGR, "p1")},
			want: decision{actionKeep, "no proxy-uid tag"},
		},
		"in the cache": {
			tags: tagsOf(uidA), cached: []types.UID{uidB, uidA},
			want: decision{actionKeep, "its Proxy is in the cache"},
		},
		"in the cache wins over any live read": {
			tags: tagsOf(uidA), cached: []types.UID{uidA}, live: &liveRead{err: apierrors.NewNotFound(proxiesGR, "p1")},
			want: decision{actionKeep, "its Proxy is in the cache"},
		},
		"not in the cache: confirm": {
			tags: tagsOf(uidA), cached: []types.UID{uidB},
			want: decision{actionConfirm, "its Proxy is not in the cache"},
		},
		"no name tag: cannot confirm": {
			tags: tagsOf(uidA, without(crawlv1alpha1.TagProxyName)),
			want: decision{actionKeep, "no proxy-namespace/proxy-name tags to confirm it by"},
		},
		"no namespace tag: cannot confirm": {
			tags: tagsOf(uidA, without(crawlv1alpha1.TagProxyNamespace)),
			live: &liveRead{err: apierrors.NewNotFound(proxiesGR, "p1")},
			want: decision{actionKeep, "no proxy-namespace/proxy-name tags to confirm it by"},
		},
		"live: exists (stale cache)": {
			tags: tagsOf(uidA), live: &liveRead{proxyRecord: proxyRecord{uid: uidA}},
			want: decision{actionKeep, "its Proxy exists (the cache is behind)"},
		},
		"live: NotFound": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewNotFound(proxiesGR, "p1")},
			want: decision{actionDelete, "Proxy crawl/p1 (uid " + string(uidA) + ") no longer exists"},
		},
		"live: recreated with another UID": {
			tags: tagsOf(uidA), live: &liveRead{proxyRecord: proxyRecord{uid: uidB}},
			want: decision{actionDelete, "Proxy crawl/p1 was recreated (uid " + string(uidB) + ", the instance's is " + string(uidA) + ")"},
		},
		"live: NotFound about another name proves nothing": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewNotFound(proxiesGR, "p2")},
			want: decision{actionKeep, `cannot confirm that Proxy crawl/p1 is gone: proxies.crawl.proxyfleet.io "p2" not found`},
		},
		"live: 404 of a resource not served proves nothing": {
			tags: tagsOf(uidA), live: &liveRead{err: notServed},
			want: decision{actionKeep, "cannot confirm that Proxy crawl/p1 is gone: the server could not find the requested resource"},
		},
		"live: a 404 page that is no Status (client-go's generic NotFound) proves nothing": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewGenericServerResponse(404, "GET", proxiesGR, "p1", "404 page not found", 0, true)},
			want: decision{actionKeep, "cannot confirm that Proxy crawl/p1 is gone: the server could not find the requested resource (get proxies.crawl.proxyfleet.io p1)"},
		},
		"live: NotFound about another resource proves nothing": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "p1")},
			want: decision{actionKeep, `cannot confirm that Proxy crawl/p1 is gone: namespaces "p1" not found`},
		},
		"live: forbidden": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewForbidden(proxiesGR, "p1", errors.New("no RBAC"))},
			want: decision{actionKeep, `cannot confirm that Proxy crawl/p1 is gone: proxies.crawl.proxyfleet.io "p1" is forbidden: no RBAC`},
		},
		"live: server error": {
			tags: tagsOf(uidA), live: &liveRead{err: apierrors.NewInternalError(errors.New("etcd down"))},
			want: decision{actionKeep, "cannot confirm that Proxy crawl/p1 is gone: Internal error occurred: etcd down"},
		},
		"live: connection refused": {
			tags: tagsOf(uidA), live: &liveRead{err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")},
			want: decision{actionKeep, "cannot confirm that Proxy crawl/p1 is gone: dial tcp 127.0.0.1:1: connect: connection refused"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := orphaned(tc.tags, cachedOf(tc.cached...), tc.live)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(decision{})); diff != "" {
				t.Errorf("orphaned (-want +got):\n%s", diff)
			}
		})
	}
}

// cachedOf is a cache holding Proxies of these UIDs.
func cachedOf(uids ...types.UID) map[types.UID]proxyRecord {
	out := map[types.UID]proxyRecord{}
	for _, uid := range uids {
		out[uid] = proxyRecord{uid: uid}
	}
	return out
}

func TestDuplicate(t *testing.T) {
	const (
		self  = "aws://eu-west-1/i-0000000000000000b"
		other = "aws://eu-west-1/i-0000000000000000a"
		grace = 10 * time.Minute
	)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	old := now.Add(-grace - time.Second)
	names := func(instance string) *liveRead {
		return &liveRead{proxyRecord: proxyRecord{uid: uidA, instance: instance}}
	}
	tests := map[string]struct {
		createdAt time.Time
		named     string // what the cached Proxy names
		live      *liveRead
		want      decision
	}{
		"age unknown (Pods, processes): never a duplicate": {
			named: other, live: names(other),
			want: decision{actionKeep, "its provider does not tell its age"},
		},
		"young: a launch may be in flight": {
			createdAt: now.Add(-time.Minute), named: other, live: names(other),
			want: decision{actionKeep, "younger than the duplicate grace period (10m0s): a launch may be in flight"},
		},
		"the one the Proxy names": {
			createdAt: old, named: self,
			want: decision{actionKeep, "its Proxy names it or none"},
		},
		"the Proxy names none yet: its create adopts it": {
			createdAt: old, named: "",
			want: decision{actionKeep, "its Proxy names it or none"},
		},
		"old, the cache names another: confirm": {
			createdAt: old, named: other,
			want: decision{actionConfirm, "its Proxy names another instance (" + other + ")"},
		},
		"old, the live read names another: collect": {
			createdAt: old, named: other, live: names(other),
			want: decision{actionDelete, "a duplicate: its Proxy names instance " + other},
		},
		"old, the live read names it (the cache is behind)": {
			createdAt: old, named: other, live: names(self),
			want: decision{actionKeep, "its Proxy names it or none (the cache is behind)"},
		},
		"old, the live read names none": {
			createdAt: old, named: other, live: names(""),
			want: decision{actionKeep, "its Proxy names it or none (the cache is behind)"},
		},
		"old, the live read fails: keep": {
			createdAt: old, named: other, live: &liveRead{err: apierrors.NewInternalError(errors.New("etcd down"))},
			want: decision{actionKeep, "cannot confirm that its Proxy names another instance: Internal error occurred: etcd down"},
		},
		"old, the Proxy was recreated meanwhile": {
			createdAt: old, named: other, live: &liveRead{proxyRecord: proxyRecord{uid: uidB, instance: other}},
			want: decision{actionKeep, "its Proxy was recreated; the orphan check collects it"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := duplicate(self, tc.createdAt, now, grace, uidA, tc.named, tc.live)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(decision{})); diff != "" {
				t.Errorf("duplicate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordedInstance(t *testing.T) {
	tests := map[string]struct {
		provider crawlv1alpha1.ProviderName
		recorded string
		want     string
	}{
		"none":                      {provider: crawlv1alpha1.ProviderAWS, want: ""},
		"named by its provider":     {provider: crawlv1alpha1.ProviderGCE, recorded: "aws://eu-west-1/i-1", want: "aws://eu-west-1/i-1"},
		"recorded before IDs named": {provider: crawlv1alpha1.ProviderGCE, recorded: "proj/zone/px-1", want: "gce://proj/zone/px-1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Provider: tc.provider}, Status: crawlv1alpha1.ProxyStatus{ProviderID: tc.recorded}}
			if got := recordedInstance(p); got != tc.want {
				t.Errorf("recordedInstance = %q, want %q", got, tc.want)
			}
		})
	}
}
