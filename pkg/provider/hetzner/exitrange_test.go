package hetzner_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// TestExitRangeIsTheServersSlash64AndBootsWithIt: with ipv6ExitRange the
// server's /64 is its exit range in Get, and its forward proxy (boot mode,
// from the user-data) is started with it; a server with public IPv6 and no
// exit range reports and boots with none; ipv6ExitRange without
// publicIPv6 is refused naming both fields. The /64 is the proxy's
// configuration only: the test machine cannot route a cloud's prefix.
func TestExitRangeIsTheServersSlash64AndBootsWithIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var boots faultkit.Boots
	fake := hcloudtest.New(t, hcloudtest.WithBoot(faultkit.BootForwardProxy(t, &boots)))
	p := newProvider(t, fake, clusterID)

	ranged, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{PublicIPv6: true, IPv6ExitRange: true}))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := p.Create(ctx, createRequest("00000002-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{PublicIPv6: true}))
	if err != nil {
		t.Fatal(err)
	}
	servers := fake.Created()
	if len(servers) != 2 || servers[0].IPv6Net == "" {
		t.Fatalf("servers %+v, want two, the first with a /64", servers)
	}
	for _, tc := range []struct {
		inst   provider.Instance
		server hcloudtest.Server
		want   []string
	}{
		{inst: ranged, server: servers[0], want: []string{servers[0].IPv6Net}},
		{inst: plain, server: servers[1]},
	} {
		got, err := p.Get(ctx, tc.inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		booted, ok := boots.ExitRanges(tc.server.Name)
		if !ok {
			t.Fatalf("server %s was not booted", tc.server.Name)
		}
		if diff := cmp.Diff(map[string][]string{"Get": tc.want, "booted": tc.want}, map[string][]string{"Get": got.ExitRanges, "booted": booted}, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, " ") == strings.Join(b, " ") })); diff != "" {
			t.Errorf("server %s exit ranges (-want +got):\n%s", tc.server.Name, diff)
		}
	}

	_, err = p.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{IPv6ExitRange: true}))
	if provider.Class(err) != provider.ErrPermanent || !strings.Contains(err.Error(), "spec.hetzner.ipv6ExitRange needs spec.hetzner.publicIPv6") {
		t.Errorf("ipv6ExitRange without publicIPv6: %v, want a permanent error naming both fields", err)
	}
}
