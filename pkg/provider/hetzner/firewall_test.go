package hetzner_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/provider/hetzner"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// TestAllowFromOwnsOneFirewallPerSettingAndSweepsIt: two Proxies with the
// same allowFrom share one firewall, made once although its first create's
// answer was lost (found by name on the retry), admitting only the proxy port from those ranges and
// applied to both servers by their label; another cluster's firewall is
// its own and survives this cluster's sweep; a firewall still applied is
// kept, and deleted once its servers are gone.
func TestAllowFromOwnsOneFirewallPerSettingAndSweepsIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t, hcloudtest.WithSteps(0))
	p := newProvider(t, fake, clusterID)
	other := newProvider(t, fake, "other-cluster")
	spec := func() *crawlv1alpha1.HetznerProvider {
		return &crawlv1alpha1.HetznerProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24", "2001:db8:7::/48"}, Port: 3129}
	}

	fake.LoseNextAnswers(hcloudtest.CreateFirewall, 1)
	if _, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", spec())); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with the firewall's answer lost: %v, want a transient error", err)
	}
	var insts []provider.Instance
	for _, uid := range []string{"00000001-0000-0000-0000-000000000000", "00000002-0000-0000-0000-000000000000"} {
		inst, err := p.Create(ctx, createRequest(uid, spec()))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := inst.Tags[hetzner.LabelFirewall]; ok {
			t.Errorf("the firewall label is reported as a Proxy tag: %v", inst.Tags)
		}
		insts = append(insts, inst)
	}
	if _, err := other.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", spec())); err != nil {
		t.Fatal(err)
	}
	fws := fake.Firewalls()
	// The lost answer's firewall is found by name, not created again.
	if len(fws) != 2 || fake.Calls(hcloudtest.CreateFirewall) != 2 {
		t.Fatalf("%d firewalls after %d creates, want one per cluster after 2: %+v", len(fws), fake.Calls(hcloudtest.CreateFirewall), fws)
	}
	ours := fws[0]
	if ours.Labels[cloudkit.LabelClusterID] != clusterID {
		ours = fws[1]
	}
	servers := fake.Created()
	rules := []string{}
	for _, r := range ours.Rules {
		rules = append(rules, r.Direction+" "+r.Protocol+" "+*r.Port+" from "+strings.Join(r.SourceIPs, ","))
	}
	got := map[string]any{"rules": rules, "applied": ours.AppliedTo, "owned": ours.Labels[hetzner.LabelOwnedFirewall]}
	want := map[string]any{
		"rules":   []string{"in tcp 3129 from 203.0.113.0/24,2001:db8:7::/48"},
		"applied": []int64{servers[0].ID, servers[1].ID},
		"owned":   "true",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("this cluster's firewall (-want +got):\n%s", diff)
	}

	if n, err := p.Sweep(ctx); n != 0 || err != nil {
		t.Errorf("sweep with servers live = %d, %v; want 0 deleted", n, err)
	}
	for _, inst := range insts {
		if err := p.Delete(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := p.Sweep(ctx); n != 1 || err != nil {
		t.Errorf("sweep with no server left = %d, %v; want 1 deleted", n, err)
	}
	left := fake.Firewalls()
	if len(left) != 1 || left[0].Labels[cloudkit.LabelClusterID] != "other-cluster" {
		t.Errorf("firewalls left %+v, want the other cluster's only", left)
	}

	// Swept: the next create of that setting makes it again.
	if _, err := p.Create(ctx, createRequest("00000004-0000-0000-0000-000000000000", spec())); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Firewalls()); n != 2 {
		t.Errorf("%d firewalls after a create following the sweep, want 2", n)
	}
}

func TestAllowFromRefusedWithFirewallIDsOrABadRange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	for name, tc := range map[string]struct {
		spec *crawlv1alpha1.HetznerProvider
		want string
	}{
		"with firewallIDs": {spec: &crawlv1alpha1.HetznerProvider{AllowFrom: []crawlv1alpha1.CIDR{"10.0.0.0/8"}, FirewallIDs: []int64{7}}, want: "spec.hetzner.allowFrom and spec.hetzner.firewallIDs are exclusive"},
		"not a CIDR":       {spec: &crawlv1alpha1.HetznerProvider{AllowFrom: []crawlv1alpha1.CIDR{"10.0.0.0/8", "gateway"}}, want: "spec.hetzner.allowFrom[1]"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", tc.spec))
			if provider.Class(err) != provider.ErrPermanent || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create = %v, want a permanent error naming %q", err, tc.want)
			}
		})
	}
	if len(fake.Created()) != 0 || len(fake.Firewalls()) != 0 {
		t.Errorf("refused creates made %d servers, %d firewalls", len(fake.Created()), len(fake.Firewalls()))
	}
}

// TestSweepKeepsAFirewallHetznerStillApplies: a server the listing does
// not show yet (Hetzner's lag) still has the firewall applied; the delete
// is refused (resource_in_use) and the firewall kept, without an error.
func TestSweepKeepsAFirewallHetznerStillApplies(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t, hcloudtest.WithSteps(0), hcloudtest.WithListLag(5))
	p := newProvider(t, fake, clusterID)
	if _, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}})); err != nil {
		t.Fatal(err)
	}
	n, err := p.Sweep(ctx)
	if n != 0 || err != nil || len(fake.Firewalls()) != 1 || fake.Calls(hcloudtest.DeleteFirewall) != 1 {
		t.Errorf("sweep = %d, %v with %d firewalls left after %d deletes; want 0 deleted, the one kept after a refused delete",
			n, err, len(fake.Firewalls()), fake.Calls(hcloudtest.DeleteFirewall))
	}
}

// TestSweepReadsEveryPageOfFirewalls: Hetzner answers at most 50
// firewalls a page. 55 settings of allowFrom make 55 firewalls; once
// their servers are gone, one sweep deletes all 55, those of the second
// page too.
func TestSweepReadsEveryPageOfFirewalls(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t, hcloudtest.WithSteps(0))
	p := newProvider(t, fake, clusterID)
	for i := range 55 {
		uid := fmt.Sprintf("%08d-0000-0000-0002-000000000000", i)
		inst, err := p.Create(ctx, createRequest(uid, &crawlv1alpha1.HetznerProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"}, Port: int32(4000 + i)}))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fake.Firewalls()); n != 55 {
		t.Fatalf("%d firewalls made, want 55", n)
	}
	n, err := p.Sweep(ctx)
	if left := fake.Firewalls(); n != 55 || err != nil || len(left) != 0 {
		t.Errorf("sweep = %d, %v with %d firewalls left; want all 55 deleted", n, err, len(left))
	}
}
