package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// down finds a component that lost its pid file by its command line: every
// component must name the node's folder in one.
func TestEveryComponentNamesTheNodeFolder(t *testing.T) {
	n := testNode()
	for _, c := range n.components() {
		cmdline := strings.Join(append([]string{c.Bin}, c.Args...), "\x00")
		if !namesDir([]byte(cmdline), n.Dir) {
			t.Errorf("%s: no argument names %s, so down cannot find it without its pid file: %q", c.Name, n.Dir, c.Args)
		}
	}
}

func TestNamesDir(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"etcd", "--data-dir=/repo/.cluster/etcd"}, true},
		{[]string{"containerd", "--config", "/repo/.cluster/containerd.toml"}, true},
		{[]string{"x", "/repo/.cluster"}, true},
		{[]string{"etcd", "--data-dir=/repo/.cluster-other/etcd"}, false},
		{[]string{"etcd", "--data-dir=/tmp/testenv/etcd"}, false},
		{[]string{"x", "--name=/repo/.cluster/a=b"}, true},
		{nil, false},
	} {
		if got := namesDir([]byte(strings.Join(tc.args, "\x00")), "/repo/.cluster/"); got != tc.want {
			t.Errorf("namesDir(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A bin/ that is a symlink (a worktree's, linked to the main checkout's) must
// not make a running component look exited: up then failed with "did not
// start: exited" and down left the process running.
func TestRunningAndStraysFollowSymlinkedBin(t *testing.T) {
	real := t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	sh, err = filepath.EvalSymlinks(sh)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(real, "sh")
	if err := os.Link(sh, bin); err != nil {
		// Another file system: copy it.
		b, err := os.ReadFile(sh)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	linkedBinDir := filepath.Join(t.TempDir(), "bin")
	if err := os.Symlink(real, linkedBinDir); err != nil {
		t.Fatal(err)
	}
	n := testNode()
	n.Dir = t.TempDir()
	// A shell that waits (the "; :" keeps it from exec-ing sleep), named by
	// the node's folder as its $0.
	c := component{Name: "sleeper", Bin: filepath.Join(linkedBinDir, "sh"), Args: []string{"-c", "sleep 60; :", n.Dir + "/marker"}}
	cmd := exec.Command(c.Bin, c.Args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.MkdirAll(filepath.Dir(n.pidFile(c.Name)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.pidFile(c.Name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, ok := running(n, c.Name, c.Bin); !ok || pid != cmd.Process.Pid {
		t.Errorf("running through a symlinked bin = (%d, %v), want (%d, true)", pid, ok, cmd.Process.Pid)
	}
	if got := strays(n.Dir, []string{c.Bin}); len(got) != 1 || got[0] != cmd.Process.Pid {
		t.Errorf("strays = %v, want [%d]", got, cmd.Process.Pid)
	}
	if got := strays(t.TempDir(), []string{c.Bin}); len(got) != 0 {
		t.Errorf("strays of another folder = %v, want none", got)
	}
}
