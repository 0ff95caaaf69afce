package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func pool(ns, name string, desired int32, change ...func(*crawlv1alpha1.ProxyPool)) *crawlv1alpha1.ProxyPool {
	p := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To(desired),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}}},
		Status: crawlv1alpha1.ProxyPoolStatus{Replicas: desired, ReadyReplicas: desired, AvailableReplicas: desired},
	}
	for _, c := range change {
		c(p)
	}
	return p
}

func member(ns, name, poolName string, change ...func(*crawlv1alpha1.Proxy)) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0),
			Labels: map[string]string{crawlv1alpha1.PoolLabel: poolName}},
		Status: crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, ExitIP: "203.0.113.7", ExitCountry: "DE", LatencyMillis: 12,
			IP: "10.0.0.1", Port: 3128},
	}
	if poolName == "" {
		delete(p.Labels, crawlv1alpha1.PoolLabel)
	}
	for _, c := range change {
		c(p)
	}
	return p
}

func readyMember(ns, name, poolName string, leases int) MemberRow {
	return MemberRow{Namespace: ns, Name: name, Pool: poolName, Phase: "Ready", ExitIP: "203.0.113.7", ExitCountry: "DE",
		LatencyMillis: 12, Leases: leases, CreatedMillis: t0.UnixMilli()}
}

func TestBuild(t *testing.T) {
	tests := map[string]struct {
		in   Inputs
		want View
	}{
		"nothing": {
			want: View{Pools: []PoolRow{}, Members: []MemberRow{}, Leases: []LeaseRow{}, Policies: []PolicyRow{}, Events: []EventRow{}},
		},
		"crawl policies: each rule's use and tier, and whether the policy applies": {
			in: Inputs{Policies: []*crawlv1alpha1.CrawlPolicy{
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "polite"}, Status: crawlv1alpha1.CrawlPolicyStatus{
					Conditions: []metav1.Condition{{Type: crawlv1alpha1.CrawlPolicyConditionValid, Status: "False", Message: "spec.rules[0].host: not RE2"}},
					Rules: []crawlv1alpha1.DomainRuleStatus{
						{Host: "*", InUse: 1},
						{Host: "example.com", InUse: 2, Waited: 3, Refused: 4, Outcomes: crawlv1alpha1.OutcomeCounts{SuccessRate: "50.0%"}, CurrentTier: "residential"},
						{Host: "*.shop", BusiestDomains: []crawlv1alpha1.DomainTierStatus{{Domain: "a.shop", Tier: "residential"},
							{Domain: "b.shop", Tier: "own"}, {Domain: "c.shop", Tier: "own"}, {Domain: "d.shop", Tier: "own"}}},
					}}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "new"}},
			}},
			want: View{Pools: []PoolRow{}, Members: []MemberRow{}, Leases: []LeaseRow{}, Events: []EventRow{}, Policies: []PolicyRow{
				{Namespace: "a", Name: "new", Rules: []RuleRow{}},
				{Namespace: "ns", Name: "polite", Valid: "False", ValidMessage: "spec.rules[0].host: not RE2", Rules: []RuleRow{
					{Host: "*", InUse: 1},
					{Host: "example.com", InUse: 2, Waited: 3, Refused: 4, SuccessRate: "50.0%", Tier: "residential"},
					{Host: "*.shop", Tier: "a.shop: residential, b.shop: own, c.shop: own, +1"},
				}},
			}},
		},
		"a pool with usage, its members' leases counted on it": {
			in: Inputs{
				Pools: []*crawlv1alpha1.ProxyPool{pool("crawl", "eu", 2, func(p *crawlv1alpha1.ProxyPool) {
					p.Status.Recycled = crawlv1alpha1.PoolRecycleStatus{Burned: 3, UsedUp: 4}
					p.Status.Usage = &crawlv1alpha1.PoolUsage{Outcomes: crawlv1alpha1.OutcomeCounts{OK: 39, Banned: 1, SuccessRate: "97.5%"},
						Cost: "1.20 USD", CostPer1000OK: "30.77 USD"}
					p.Status.Conditions = []metav1.Condition{{Type: "Available", Status: "True", Reason: "MinimumAvailable", Message: "2 of 2"}}
				})},
				Proxies:     []*crawlv1alpha1.Proxy{member("crawl", "eu-b", "eu"), member("crawl", "eu-a", "eu")},
				Leases:      []Lease{{Namespace: "crawl", Proxy: "eu-a", Holder: "crawler-1", Domain: "example.com", GrantedAt: t0.Add(time.Minute)}},
				LeasesKnown: true,
			},
			want: View{
				Policies: []PolicyRow{}, Events: []EventRow{},
				Pools: []PoolRow{{Namespace: "crawl", Name: "eu", Provider: "local", Desired: 2, Members: 2, Ready: 2, Available: 2,
					Leased: 1, Burned: 3, UsedUp: 4, SuccessRate: "97.5%", OK: 39, Outcomes: 40, Cost: "1.20 USD", CostPer1000OK: "30.77 USD",
					Conditions: []ConditionRow{{Type: "Available", Status: "True", Reason: "MinimumAvailable", Message: "2 of 2"}}}},
				Members: []MemberRow{readyMember("crawl", "eu-a", "eu", 1), readyMember("crawl", "eu-b", "eu", 0)},
				Leases: []LeaseRow{{Namespace: "crawl", Proxy: "eu-a", Pool: "eu", Holder: "crawler-1", Domain: "example.com",
					GrantedMillis: t0.Add(time.Minute).UnixMilli()}},
				LeasesKnown: true,
			},
		},
		"why members leave, in order of precedence": {
			in: Inputs{Proxies: []*crawlv1alpha1.Proxy{
				member("ns", "a", "p", func(p *crawlv1alpha1.Proxy) {
					p.Status.Conditions = []metav1.Condition{{Type: crawlv1alpha1.ProxyConditionRecycled, Status: "True", Reason: "Burned"}}
					p.Annotations = map[string]string{crawlv1alpha1.DrainReasonAnnotation: "OutOfDate"}
				}),
				member("ns", "b", "p", func(p *crawlv1alpha1.Proxy) {
					p.Annotations = map[string]string{crawlv1alpha1.DrainingAnnotation: "2026-12-05T12:00:00Z", crawlv1alpha1.DrainReasonAnnotation: "ScaledDown"}
				}),
				member("ns", "c", "p", func(p *crawlv1alpha1.Proxy) {
					p.Annotations = map[string]string{crawlv1alpha1.DrainingAnnotation: "2026-12-05T12:00:00Z"}
				}),
				member("ns", "d", "p", func(p *crawlv1alpha1.Proxy) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }),
			}},
			want: View{Pools: []PoolRow{}, Leases: []LeaseRow{}, Policies: []PolicyRow{}, Events: []EventRow{}, Members: []MemberRow{
				withLeaving(readyMember("ns", "a", "p", 0), "Recycled: Burned"),
				withLeaving(readyMember("ns", "b", "p", 0), "Draining: ScaledDown"),
				withLeaving(readyMember("ns", "c", "p", 0), "Draining"),
				withLeaving(readyMember("ns", "d", "p", 0), "Deleting"),
			}},
		},
		"the domains a member cools down for, the first few named": {
			in: Inputs{
				Proxies: []*crawlv1alpha1.Proxy{member("ns", "a", "p"), member("ns", "b", "p")},
				Cooling: []Cooling{{Namespace: "ns", Proxy: "a", Total: 7,
					Domains: []string{"d1.example", "d2.example", "d3.example", "d4.example", "d5.example", "d6.example"}}},
			},
			want: View{Pools: []PoolRow{}, Leases: []LeaseRow{}, Policies: []PolicyRow{}, Events: []EventRow{}, Members: []MemberRow{
				func() MemberRow {
					m := readyMember("ns", "a", "p", 0)
					m.CoolingDown, m.CoolingDownTotal = []string{"d1.example", "d2.example", "d3.example", "d4.example", "d5.example"}, 7
					return m
				}(),
				readyMember("ns", "b", "p", 0),
			}},
		},
		"a proxy of no pool, sorted before pools' members; leases by grant time": {
			in: Inputs{
				Proxies: []*crawlv1alpha1.Proxy{member("ns", "z-pool-member", "p"), member("ns", "loose", "")},
				Leases: []Lease{
					{Namespace: "ns", Proxy: "z-pool-member", Holder: "late", GrantedAt: t0.Add(2 * time.Second)},
					{Namespace: "ns", Proxy: "loose", Holder: "early", GrantedAt: t0},
				},
				LeasesKnown: true,
			},
			want: View{Pools: []PoolRow{}, Policies: []PolicyRow{}, Events: []EventRow{}, LeasesKnown: true,
				Members: []MemberRow{readyMember("ns", "loose", "", 1), readyMember("ns", "z-pool-member", "p", 1)},
				Leases: []LeaseRow{
					{Namespace: "ns", Proxy: "loose", Holder: "early", GrantedMillis: t0.UnixMilli()},
					{Namespace: "ns", Proxy: "z-pool-member", Pool: "p", Holder: "late", GrantedMillis: t0.Add(2 * time.Second).UnixMilli()},
				}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Build(tc.in)); diff != "" {
				t.Errorf("Build (-want +got):\n%s", diff)
			}
		})
	}
}

func withLeaving(m MemberRow, why string) MemberRow { m.Leaving = why; return m }

func TestFilter(t *testing.T) {
	all := Build(Inputs{
		Pools:   []*crawlv1alpha1.ProxyPool{pool("a", "p", 1), pool("b", "q", 1)},
		Proxies: []*crawlv1alpha1.Proxy{member("a", "p-1", "p"), member("b", "q-1", "q")},
		Leases:  []Lease{{Namespace: "a", Proxy: "p-1", Holder: "h"}, {Namespace: "b", Proxy: "q-1", Holder: "h"}},
		Policies: []*crawlv1alpha1.CrawlPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "q"}}},
		LeasesKnown: true,
	})
	if diff := cmp.Diff([]string{"a", "b", "c"}, all.Namespaces()); diff != "" {
		t.Errorf("Namespaces (-want +got):\n%s", diff)
	}
	tests := map[string]struct {
		visible      map[string]bool
		wantPools    []string
		wantProxies  []string
		wantPolicies []string
	}{
		"every namespace": {visible: map[string]bool{"a": true, "b": true, "c": true}, wantPools: []string{"a/p", "b/q"}, wantProxies: []string{"a/p-1", "b/q-1"}, wantPolicies: []string{"a/p", "c/q"}},
		"one namespace":   {visible: map[string]bool{"b": true}, wantPools: []string{"b/q"}, wantProxies: []string{"b/q-1"}, wantPolicies: []string{}},
		"none":            {visible: map[string]bool{}, wantPools: []string{}, wantProxies: []string{}, wantPolicies: []string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Filter(all, func(ns string) bool { return tc.visible[ns] })
			pools, members, leases, policies := []string{}, []string{}, []string{}, []string{}
			for _, p := range got.Policies {
				policies = append(policies, p.Namespace+"/"+p.Name)
			}
			if diff := cmp.Diff(tc.wantPolicies, policies); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
			for _, p := range got.Pools {
				pools = append(pools, p.Namespace+"/"+p.Name)
			}
			for _, m := range got.Members {
				members = append(members, m.Namespace+"/"+m.Name)
			}
			for _, l := range got.Leases {
				leases = append(leases, l.Namespace+"/"+l.Proxy)
			}
			if diff := cmp.Diff(tc.wantPools, pools); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantProxies, members); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantProxies, leases); diff != "" {
				t.Errorf("leases (-want +got):\n%s", diff)
			}
			if !got.LeasesKnown {
				t.Error("LeasesKnown lost")
			}
		})
	}
}
