package main

import (
	"fmt"
	"os"
	"strings"
)

// sandboxImage is imported by up (make image --images=pause); containerd would
// otherwise try to pull registry.k8s.io/pause, which no project machine reaches.
func sandboxImage(version string) string { return "ghcr.io/proxyfleet/pause:" + version }

func (n node) containerd() component {
	config := n.path("containerd", "config.toml")
	return component{Name: "containerd", Bin: n.bin("containerd"), Args: []string{"--config=" + config},
		Files: map[string]string{
			config: n.containerdConfig(),
			n.path("cni", "net.d", "10-node.conflist"): n.cniConfig(),
		},
		// containerd starts the shim from PATH, and the shim runc.
		Env: []string{"PATH=" + n.BinDir + ":" + os.Getenv("PATH")},
	}
}

// containerdConfig keeps containerd's state under the node's folder. Without
// restrict_oom_score_adj every sandbox fails on machines that withhold
// CAP_SYS_RESOURCE from root (testenv-notes.md, "A real node").
func (n node) containerdConfig() string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return strings.Join([]string{
		"version = 3",
		"root = " + q(n.path("containerd", "root")),
		"state = " + q(n.path("containerd", "state")),
		"[grpc]",
		"  address = " + q(n.containerdSocket()),
		"[ttrpc]",
		"  address = " + q(n.containerdSocket()+".ttrpc"),
		"[plugins.'io.containerd.cri.v1.images'.pinned_images]",
		"  sandbox = " + q(sandboxImage(n.Version)),
		"[plugins.'io.containerd.cri.v1.runtime']",
		"  restrict_oom_score_adj = true",
		"  netns_mounts_under_state_dir = true",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
		"  BinaryName = " + q(n.Runc),
		"  SystemdCgroup = false",
		"[plugins.'io.containerd.cri.v1.runtime'.cni]",
		"  bin_dirs = [" + q(n.bin("cni")) + "]",
		"  conf_dir = " + q(n.path("cni", "net.d")),
		"",
	}, "\n")
}

// cniConfig: one bridge with host-local addresses from the node's Pod range, and
// portmap for hostPorts. The address records stay under the node's folder.
func (n node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "proxy-operator-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.Bridge, n.PodCIDR.String(), n.path("cni", "networks"))
}
