package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testNode() node {
	return node{
		Dir: "/repo/.cluster", BinDir: "/repo/bin", Name: "n", Runc: "/usr/sbin/runc", Version: "v1.2.3",
		IP: netip.MustParseAddr("192.0.2.2"), APIPort: 6443, EtcdPort: 2479, EtcdPeerPort: 2480, Bridge: "po-cni0",
		PodCIDR:     netip.MustParsePrefix("10.244.0.0/24"),
		ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
	}
}

// Everything a component reads or writes lives under the node's folder (which
// down removes) or is one of the pinned binaries: no state on the host.
func TestComponentsKeepStateInTheNodeFolder(t *testing.T) {
	n := testNode()
	for _, c := range n.components() {
		if !strings.HasPrefix(c.Bin, n.BinDir+"/") {
			t.Errorf("%s: binary %s is not under %s", c.Name, c.Bin, n.BinDir)
		}
		for _, arg := range c.Args {
			_, value, _ := strings.Cut(arg, "=")
			if strings.HasPrefix(value, "/") && !strings.HasPrefix(value, n.Dir+"/") {
				t.Errorf("%s: %s is outside %s", c.Name, arg, n.Dir)
			}
		}
		for path := range c.Files {
			if !strings.HasPrefix(path, n.Dir+"/") {
				t.Errorf("%s: writes %s outside %s", c.Name, path, n.Dir)
			}
		}
	}
}

// The settings testenv-notes.md found necessary on the project's machines.
func TestNodeSettingsTheMachineNeeds(t *testing.T) {
	n := testNode()
	for _, want := range []struct{ config, setting string }{
		{n.containerdConfig(), "restrict_oom_score_adj = true"},
		{n.containerdConfig(), `sandbox = "ghcr.io/proxyfleet/pause:v1.2.3"`},
		{n.containerdConfig(), `BinaryName = "/usr/sbin/runc"`},
		{n.kubeletConfig(), "failCgroupV1: false"},
		{n.kubeletConfig(), "cgroupDriver: cgroupfs"},
		{n.kubeProxyConfig(), "conntrack: {maxPerCore: 0"},
	} {
		if !strings.Contains(want.config, want.setting) {
			t.Errorf("config lacks %q:\n%s", want.setting, want.config)
		}
	}
	var args []string
	for _, c := range n.components() {
		if c.Name == "kube-apiserver" {
			args = c.Args
		}
	}
	if !strings.Contains(strings.Join(args, " "), "--kubelet-preferred-address-types=InternalIP") {
		t.Errorf("kube-apiserver args lack InternalIP address type (kubectl logs): %v", args)
	}
}

func TestJumpsTo(t *testing.T) {
	ours := func(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") }
	tests := map[string]bool{
		`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`: true,
		`-A POSTROUTING -s 10.244.0.2/32 -j CNI-0123abcd`:                                  true,
		`-A FORWARD -g KUBE-FORWARD`:                                                       true,
		`-A INPUT -j ACCEPT`:                                                               false,
		`-A DOCKER-USER -j RETURN`:                                                         false,
	}
	got := map[string]bool{}
	for rule := range tests {
		got[rule] = jumpsTo(strings.Fields(rule), ours)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("jumpsTo (-want +got):\n%s", diff)
	}
}
