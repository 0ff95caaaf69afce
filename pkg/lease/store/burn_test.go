package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func withProviderID(id string) proxyOption { return func(p *ProxyInfo) { p.ProviderID = id } }

// TestBurnCountsPerInstance drives grants, releases and time through the
// store and reads BurnByProxy after each step.
func TestBurnCountsPerInstance(t *testing.T) {
	type release struct {
		outcome Outcome
		domain  string
	}
	// step is one lease on proxy "a" (acquired for domain, released with
	// release), then the clock moves by advance, then an optional upsert.
	type step struct {
		domain  string
		release release
		advance time.Duration
		upsert  []proxyOption
	}
	banned := func(d string) release { return release{outcome: OutcomeBanned, domain: d} }
	ok := release{outcome: OutcomeOK}
	tests := map[string]struct {
		steps  []step
		window time.Duration
		want   map[string]Burn
	}{
		"nothing leased: nothing reported": {window: time.Hour, want: map[string]Burn{}},
		"grants count, oks are no bans": {
			steps:  []step{{release: ok}, {release: ok}, {release: release{outcome: OutcomeError}}},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 3}},
		},
		"distinct domains count once each": {
			steps:  []step{{release: banned("x.example")}, {release: banned("X.example.")}, {release: banned("y.example")}},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 3, BannedDomains: 2}},
		},
		"names of one site are one banned domain": {
			steps:  []step{{release: banned("a.site.example.com")}, {release: banned("b.site.example.com")}, {release: banned("site.example.com")}, {release: banned("www.example.co.uk")}},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 4, BannedDomains: 2}},
		},
		"the lease's domain is the default of a ban": {
			steps:  []step{{domain: "shop.example", release: banned("")}},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 1, BannedDomains: 1}},
		},
		"bans older than the window do not count": {
			steps: []step{
				{release: banned("x.example"), advance: 2 * time.Hour},
				{release: banned("y.example"), advance: time.Minute},
			},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 2, BannedDomains: 1}},
		},
		"a new ban refreshes an old domain": {
			steps: []step{
				{release: banned("x.example"), advance: 2 * time.Hour},
				{release: banned("x.example")},
			},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 2, BannedDomains: 1}},
		},
		"a new instance under the same name starts clean": {
			steps: []step{
				{release: banned("x.example")},
				{release: banned("y.example"), upsert: []proxyOption{withProviderID("local://a-2"), withURL("http://127.0.0.1:3129")}},
				{release: banned("z.example")},
			},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-2", Served: 1, BannedDomains: 1}},
		},
		"a recreated Proxy starts clean": {
			steps: []step{
				{release: banned("x.example"), upsert: []proxyOption{withUID("a-uid-2")}},
			},
			window: time.Hour,
			want:   map[string]Burn{},
		},
		"a new address of the same instance keeps its record": {
			steps: []step{
				{release: banned("x.example"), upsert: []proxyOption{withURL("http://127.0.0.1:4000")}},
				{release: ok},
			},
			window: time.Hour,
			want:   map[string]Burn{"a": {ProviderID: "local://a-1", Served: 2, BannedDomains: 1}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := []proxyOption{withProviderID("local://a-1"), withMaxLeases(1)}
			s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a", base...), newProxy("b", inNamespace("other"))})
			opts := base
			for i, st := range tc.steps {
				l := acquire(t, s, AcquireRequest{Namespace: testNamespace, Domain: st.domain})
				if err := s.ReleaseAs("", l.ID, st.release.outcome, st.release.domain, Report{}); err != nil {
					t.Fatalf("step %d: release: %v", i, err)
				}
				clk.Step(st.advance)
				if st.upsert != nil {
					opts = append(opts, st.upsert...)
					s.Upsert(newProxy("a", opts...))
				}
			}
			got, err := s.BurnByProxy(testNamespace, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("BurnByProxy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewInstanceForgetsCooldowns: the Proxy controller replaced the
// instance under the same Proxy name (a new providerID, so a new IP): the
// domain that banned the old instance is leased on the new one at once.
func TestNewInstanceForgetsCooldowns(t *testing.T) {
	s, _, m := newTestStore(t, []ProxyInfo{newProxy("a", withProviderID("local://a-1"))})
	l := acquire(t, s, AcquireRequest{Domain: "shop.example"})
	if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
		t.Fatal(err)
	}
	var unavailable *UnavailableError
	if _, err := s.Acquire(t.Context(), AcquireRequest{Holder: "w", Domain: "shop.example"}); !errors.As(err, &unavailable) || !errors.Is(unavailable.Reason, ErrCoolingDown) {
		t.Fatalf("acquire after the ban: %v, want cooling down", err)
	}
	s.Upsert(newProxy("a", withProviderID("local://a-2"), withURL("http://127.0.0.1:3999")))
	again := acquire(t, s, AcquireRequest{Domain: "shop.example"})
	if again.Proxy.URL != "http://127.0.0.1:3999" {
		t.Errorf("leased %s, want the new instance", again.Proxy.URL)
	}
	if got := m.Snapshot().Cooldowns; got != 0 {
		t.Errorf("%d cool-downs in force after the instance changed, want 0", got)
	}
}

// TestBurnDomainsAreBounded: an instance banned by more domains than any
// policy can ask for keeps the newest maxBurnDomains.
func TestBurnDomainsAreBounded(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("a")}, withStoreConfig(func(c *Config) { c.MaxCooldowns = 1000 }))
	for i := range maxBurnDomains + 20 {
		l := acquire(t, s, AcquireRequest{})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, fmt.Sprintf("d%d.example", i), Report{}); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
	}
	got, _ := s.BurnByProxy(testNamespace, time.Hour)
	if diff := cmp.Diff(Burn{Served: maxBurnDomains + 20, BannedDomains: maxBurnDomains}, got["a"]); diff != "" {
		t.Errorf("burn (-want +got):\n%s", diff)
	}
	// The oldest went: a 100-second window holds only the newest 100.
	if got, _ := s.BurnByProxy(testNamespace, 100*time.Second); got["a"].BannedDomains != maxBurnDomains {
		t.Errorf("within 100s: %d domains, want %d", got["a"].BannedDomains, maxBurnDomains)
	}
}

func TestBurnByProxyNeedsTheLead(t *testing.T) {
	s, err := New(Config{Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BurnByProxy(testNamespace, time.Hour); !errors.Is(err, ErrNotLeader) {
		t.Errorf("BurnByProxy on a store that does not lead: %v, want ErrNotLeader", err)
	}
}
