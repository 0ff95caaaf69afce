package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
)

// A member is replaced at spec.maxAge, or at the age limit of its
// provider (a session's: four fifths of its lifetime) when that is sooner,
// and the event says which of the two it was.
func TestMaxAgeAndItsEvent(t *testing.T) {
	providers := provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
	created := metav1.NewTime(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	session := func(lifetime time.Duration) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream, Upstream: &crawlv1alpha1.UpstreamProvider{SessionLifetime: &metav1.Duration{Duration: lifetime}}}
	}
	local := crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}
	tests := map[string]struct {
		template  crawlv1alpha1.ProxySpec
		maxAge    *metav1.Duration
		providers provider.Set
		want      time.Duration
		wantEvent string
	}{
		"no maxAge, no provider limit: never": {template: local, providers: providers},
		"maxAge": {
			template: local, maxAge: &metav1.Duration{Duration: time.Hour}, providers: providers, want: time.Hour,
			wantEvent: "replaced because too old (created 2026-12-01T08:00:00Z, maxAge 1h0m0s)",
		},
		"a session without maxAge: four fifths of its lifetime": {
			template: session(10 * time.Minute), providers: providers, want: 8 * time.Minute,
			wantEvent: "replaced before its session's lifetime ends (created 2026-12-01T08:00:00Z, spec.template.spec.upstream.sessionLifetime 10m0s)",
		},
		"a session whose lifetime ends before maxAge": {
			template: session(10 * time.Minute), maxAge: &metav1.Duration{Duration: time.Hour}, providers: providers, want: 8 * time.Minute,
			wantEvent: "replaced before its session's lifetime ends (created 2026-12-01T08:00:00Z, spec.template.spec.upstream.sessionLifetime 10m0s)",
		},
		"a session whose maxAge comes first": {
			template: session(time.Hour), maxAge: &metav1.Duration{Duration: 30 * time.Minute}, providers: providers, want: 30 * time.Minute,
			wantEvent: "replaced because too old (created 2026-12-01T08:00:00Z, maxAge 30m0s)",
		},
		"a session whose provider is not enabled: maxAge only": {
			template: session(10 * time.Minute), maxAge: &metav1.Duration{Duration: time.Hour}, want: time.Hour,
			wantEvent: "replaced because too old (created 2026-12-01T08:00:00Z, maxAge 1h0m0s)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pool := &crawlv1alpha1.ProxyPool{Spec: crawlv1alpha1.ProxyPoolSpec{MaxAge: tc.maxAge, Template: crawlv1alpha1.ProxyTemplate{Spec: tc.template}}}
			pol, err := policyOf(pool, "rev", tc.providers)
			if err != nil {
				t.Fatal(err)
			}
			if pol.MaxAge != tc.want {
				t.Errorf("policy MaxAge = %v, want %v", pol.MaxAge, tc.want)
			}
			if tc.wantEvent == "" {
				return
			}
			member := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}
			if diff := cmp.Diff(tc.wantEvent, describeReason(ReasonTooOld, member, pool, tc.providers)); diff != "" {
				t.Errorf("event text (-want +got):\n%s", diff)
			}
		})
	}
}
