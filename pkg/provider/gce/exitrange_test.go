package gce

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
)

// TestExitRangeIsTheVMsExternalSlash96: with spec.gce.ipv6ExitRange the
// VM is dual-stack with a DIRECT_IPV6 access config (gcetest refuses one
// without IPV4_IPV6), Get reports the /96 Compute Engine gave it, and the
// VM's metadata carries the boot script that sets it up. gcetest has no
// boot mode: what the VM runs is the script, run with sh in
// TestExitRangeDiscoverReadsTheMetadataServer; no cloud prefix can be
// routed on the test machine.
func TestExitRangeIsTheVMsExternalSlash96(t *testing.T) {
	fake := gcetest.New(t, gcetest.WithSteps(0))
	p := newTestProvider(t, fake)
	ctx := context.Background()
	ranged := testProxy(withUID(uid(1)), withGCE(func(g *crawlv1alpha1.GCEProvider) { g.IPv6ExitRange = true }))
	plain := testProxy(withUID(uid(2)))
	var got []provider.Instance
	for _, px := range []*crawlv1alpha1.Proxy{ranged, plain} {
		inst, err := p.Create(ctx, createRequest(px, nil))
		if err != nil {
			t.Fatal(err)
		}
		if inst, err = p.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		got = append(got, inst)
	}
	gvm, ok := fake.Instance(gcetest.DefaultProject, zoneA, provider.InstanceName(ranged.UID))
	if !ok {
		t.Fatal("no VM in the fake")
	}
	vm := fromGoogle(t, gvm)
	nic := vm.NetworkInterfaces[0]
	if nic.StackType != "IPV4_IPV6" || len(nic.Ipv6AccessConfigs) != 1 || nic.Ipv6AccessConfigs[0].ExternalIpv6PrefixLength != 96 {
		t.Fatalf("interface %+v, want IPV4_IPV6 with one external /96", nic)
	}
	want := [][]string{{nic.Ipv6AccessConfigs[0].ExternalIpv6 + "/96"}, nil}
	if diff := cmp.Diff(want, [][]string{got[0].ExitRanges, got[1].ExitRanges}); diff != "" {
		t.Errorf("ExitRanges of the ranged and the plain VM (-want +got):\n%s", diff)
	}
	if script, _ := metadataValue(vm, MetadataExitRangeScript); script != cloudkit.ExitRangeScript(exitRangeBoot) {
		t.Errorf("metadata %s = %q, want the kit's boot script", MetadataExitRangeScript, script)
	}
}

func TestExternalIPv6Ranges(t *testing.T) {
	ac := func(ip string, n int64) *compute.AccessConfig {
		return &compute.AccessConfig{Type: "DIRECT_IPV6", ExternalIpv6: ip, ExternalIpv6PrefixLength: n}
	}
	for name, tc := range map[string]struct {
		configs []*compute.AccessConfig
		want    []string
	}{
		"none":          {},
		"not yet given": {configs: []*compute.AccessConfig{ac("", 0)}},
		"a /96":         {configs: []*compute.AccessConfig{ac("2600:1900:4000:1a2b:0:5::", 96)}, want: []string{"2600:1900:4000:1a2b:0:5::/96"}},
	} {
		t.Run(name, func(t *testing.T) {
			vm := &compute.Instance{NetworkInterfaces: []*compute.NetworkInterface{{Ipv6AccessConfigs: tc.configs}}}
			if diff := cmp.Diff(tc.want, externalIPv6Ranges(vm)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestExitRangeDiscoverReadsTheMetadataServer runs the boot script's
// discover command with sh against a stubbed curl that answers as the
// metadata server does, only with Metadata-Flavor: Google.
func TestExitRangeDiscoverReadsTheMetadataServer(t *testing.T) {
	bin := t.TempDir()
	curl := "#!/bin/sh\ncase \"$*\" in\n*'Metadata-Flavor: Google'*/network-interfaces/0/ipv6s) printf '2600:1900:4000:1a2b:0:5::\\n' ;;\n*) exit 22 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(curl), 0o755); err != nil {
		t.Fatal(err)
	}
	integration.Needs(t, "sh run as a process")
	cmd := exec.Command("sh", "-c", exitRangeBoot.Discover)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "2600:1900:4000:1a2b:0:5::/96" {
		t.Errorf("discovered %q, want the /96", got)
	}
}
