package hetzner

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// TestExitRangeDiscoverFindsTheOnLinkSlash64 runs the boot script's
// discover command with sh against the kernel routes a Hetzner server
// shows (ip stubbed): the /64 cloud-init configured, not the link-local.
func TestExitRangeDiscoverFindsTheOnLinkSlash64(t *testing.T) {
	bin := t.TempDir()
	routes := "2a01:4f8:c17:1a2b::/64 dev eth0 proto kernel metric 256 pref medium\nfe80::/64 dev eth0 proto kernel metric 256 pref medium\n"
	if err := os.WriteFile(filepath.Join(bin, "ip"), []byte("#!/bin/sh\n[ \"$*\" = '-6 route show proto kernel' ] && printf '"+routes+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	integration.Needs(t, "sh run as a process")
	cmd := exec.Command("sh", "-c", exitRangeBoot.Discover)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "2a01:4f8:c17:1a2b::/64\n"; got != want {
		t.Errorf("discovered %q, want %q", got, want)
	}
}
