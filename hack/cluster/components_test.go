package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
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

// Cluster DNS and NetworkPolicy enforcement: the kubelet points Pods at the
// kube-dns Service's address, which the addons give CoreDNS (make
// cluster-images' build, never pulled), serving the cluster domain; the
// addons bind kube-router's certificate identity to its role, and
// kube-router runs its policy controller alone.
func TestClusterDNSAndPolicyAddons(t *testing.T) {
	n := testNode()
	if !strings.Contains(n.kubeletConfig(), "clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n") {
		t.Errorf("kubelet config lacks the cluster DNS:\n%s", n.kubeletConfig())
	}
	objects := map[string]map[string]any{}
	for _, doc := range strings.Split(n.addonsManifest(), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		meta := o["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		objects[o["kind"].(string)+" "+ns+"/"+meta["name"].(string)] = o
	}
	get := func(key string, path ...any) any {
		var v any = objects[key]
		for _, p := range path {
			switch p := p.(type) {
			case string:
				v = v.(map[string]any)[p]
			case int:
				v = v.([]any)[p]
			}
		}
		return v
	}
	var routerCN string
	for _, id := range n.identities() {
		if id.user == "kube-router" {
			routerCN = id.cn
		}
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"kube-dns clusterIP", get("Service kube-system/kube-dns", "spec", "clusterIP"), "10.96.0.10"},
		{"CoreDNS image", get("Deployment kube-system/coredns", "spec", "template", "spec", "containers", 0, "image"), "ghcr.io/proxyfleet/coredns:v1.2.3"},
		{"CoreDNS pull policy", get("Deployment kube-system/coredns", "spec", "template", "spec", "containers", 0, "imagePullPolicy"), "Never"},
		{"kube-router's binding", get("ClusterRoleBinding /system:kube-router", "subjects", 0, "name"), routerCN},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !strings.Contains(get("ConfigMap kube-system/coredns", "data", "Corefile").(string), "kubernetes cluster.local in-addr.arpa") {
		t.Errorf("the Corefile does not serve cluster.local:\n%s", get("ConfigMap kube-system/coredns", "data", "Corefile"))
	}
	args := strings.Join(n.kubeRouter().Args, " ")
	for _, want := range []string{"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false", "--service-cluster-ip-range=10.96.0.0/16"} {
		if !strings.Contains(args, want) {
			t.Errorf("kube-router args lack %s: %s", want, args)
		}
	}
}
