package pool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
)

func countryOf(ip, exit, asked string) memberOption {
	return func(m *Member) { m.ExitIP, m.ExitCountry, m.AskedCountry = ip, exit, asked }
}

// TestDecideRerollsExitCountryMismatch: a network member measured in
// another country than it asked for is re-rolled, within the budget of any
// stale member; unknown or unasked countries never are.
func TestDecideRerollsExitCountryMismatch(t *testing.T) {
	evidence := "exit IP 127.0.9.2 is in US, but its network was asked for DE"
	tests := map[string]struct {
		pol     Policy
		members []Member
		want    planOf
	}{
		"countries as asked": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", countryOf("127.0.9.1", "DE", "DE")), member("b", countryOf("127.0.9.2", "US", "US"))},
		},
		"unknown exit country": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", countryOf("127.0.9.1", "", "DE")), member("b", countryOf("127.0.9.2", "", "DE"))},
		},
		"no country asked": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", countryOf("127.0.9.1", "DE", "")), member("b", countryOf("127.0.9.2", "US", ""))},
		},
		"mismatch drains once the pool has room": {
			pol:     policy(2, 1, 1),
			members: []Member{member("a", countryOf("127.0.9.1", "DE", "DE")), member("b", countryOf("127.0.9.2", "US", "DE"), leases(1))},
			want:    planOf{Create: 1, Drain: []Removal{{Name: "b", Reason: ReasonExitCountryMismatch, Leases: 1, Evidence: evidence}}},
		},
		"a full pool makes the successor first": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", countryOf("127.0.9.1", "DE", "DE")), member("b", countryOf("127.0.9.2", "US", "DE"))},
			want:    planOf{Create: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.pol, tc.members, t0)
			got := planOf{Create: p.Create, Drain: p.Drain, Delete: p.Delete, Paused: p.RemediationPaused}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExitCountryRelabels(t *testing.T) {
	px := func(label *string, status string, deleting bool) *crawlv1alpha1.Proxy {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{crawlv1alpha1.PoolLabel: "res"}}}
		if label != nil {
			p.Labels[crawlv1alpha1.ExitCountryLabel] = *label
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		p.Status.ExitCountry = status
		return p
	}
	de, us, empty := "DE", "US", ""
	got := exitCountryRelabels(map[string]*crawlv1alpha1.Proxy{
		"in-sync":         px(&de, "DE", false),
		"unmeasured":      px(nil, "", false),
		"new-country":     px(nil, "DE", false),
		"moved":           px(&us, "DE", false),
		"lost":            px(&de, "", false),
		"empty-label":     px(&empty, "", false),
		"deleting":        px(nil, "DE", true),
		"another-in-sync": px(&us, "US", false),
	})
	want := []relabel{{"empty-label", ""}, {"lost", ""}, {"moved", "DE"}, {"new-country", "DE"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exitCountryRelabels (-want +got):\n%s", diff)
	}
}

// TestAskedCountry: only a two-letter {country} of a provider that asks
// for one is a country to check.
func TestAskedCountry(t *testing.T) {
	px := func(template string, countries ...string) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID("0b4f7c2e-1111-2222-3333-444455556666")},
			Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream,
				Upstream: &crawlv1alpha1.UpstreamProvider{UsernameTemplate: template, Countries: countries}},
		}
	}
	providers := provider.Set{crawlv1alpha1.ProviderUpstream: &upstream.Provider{}}
	got := map[string]string{
		"de":        providers.AskedCountry(px("c-{country}-s-{session}", "de")),
		"uk":        providers.AskedCountry(px("c-{country}-s-{session}", "uk")),
		"region":    providers.AskedCountry(px("c-{country}-s-{session}", "eu_west")),
		"unused":    providers.AskedCountry(px("s-{session}", "de")),
		"no-upstrm": providers.AskedCountry(&crawlv1alpha1.Proxy{}),
	}
	want := map[string]string{"de": "DE", "uk": "GB", "region": "", "unused": "", "no-upstrm": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AskedCountry (-want +got):\n%s", diff)
	}
}
