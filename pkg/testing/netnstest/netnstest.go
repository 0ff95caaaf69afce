// Package netnstest makes Linux network namespaces for tests: named
// namespaces (`ip netns add`), veth pairs between them, addresses and
// routes, and a way to open sockets inside one from the test process.
// Everything a test makes is removed on cleanup, also when it fails;
// namespaces left by a killed earlier run are recognised by their name
// prefix and the dead process id in it, and removed by the next run.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ip
// command: Needs skips under -short and fails otherwise, naming them.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// Prefix starts the name of every namespace this package makes:
// "pxotest-<pid>-<role>".
const Prefix = "pxotest-"

// Requirement is what a netns test needs, for integration.Needs and the
// failure when it is missing. No make target provides root.
const Requirement = "root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's ip command (`make deps` installs iproute2) to make network namespaces"

// Needs marks t as a netns test: skipped under -short, failed naming
// Requirement when not root or without ip. It removes leftovers of killed
// earlier runs once per process.
func Needs(t testing.TB) {
	t.Helper()
	integration.Needs(t, Requirement)
	if os.Geteuid() != 0 {
		t.Fatalf("netnstest: not root (euid %d): this test needs %s", os.Geteuid(), Requirement)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("netnstest: %v: this test needs %s", err, Requirement)
	}
	leftovers.Do(func() { removeLeftovers(t) })
}

var leftovers sync.Once

// removeLeftovers deletes namespaces of this package whose process is gone.
func removeLeftovers(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Logf("netnstest: ip netns list: %v", err)
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := ownerPID(name)
		if !ok || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Logf("netnstest: removing leftover %s: %v: %s", name, err, out)
		}
	}
}

// ownerPID reads the process id from a name made by New.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0, false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// Namespace is a named network namespace made by New.
type Namespace struct {
	Name string
}

// New makes the namespace "pxotest-<pid>-<role>" with its loopback up,
// and deletes it on cleanup (its veth ends, addresses and routes go with
// it).
func New(t testing.TB, role string) *Namespace {
	t.Helper()
	ns := &Namespace{Name: fmt.Sprintf("%s%d-%s", Prefix, os.Getpid(), role)}
	run(t, "netns", "add", ns.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("netnstest: deleting %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.IP(t, "link", "set", "lo", "up")
	return ns
}

// IP runs `ip -n <ns> args...`, failing t on error.
func (ns *Namespace) IP(t testing.TB, args ...string) {
	t.Helper()
	run(t, append([]string{"-n", ns.Name}, args...)...)
}

// Veth links a and b with a veth pair, aName in a and bName in b, both up.
// IPv6 duplicate address detection is off on both ends: their link-local
// addresses (which neighbour discovery speaks from) are usable at once,
// rather than after a second or more in which the first packets are lost.
func Veth(t testing.TB, a *Namespace, aName string, b *Namespace, bName string) {
	t.Helper()
	run(t, "link", "add", aName, "netns", a.Name, "type", "veth", "peer", "name", bName, "netns", b.Name)
	for _, end := range []struct {
		ns   *Namespace
		name string
	}{{a, aName}, {b, bName}} {
		key := "net.ipv6.conf." + end.name + ".accept_dad=0"
		if out, err := exec.Command("ip", "netns", "exec", end.ns.Name, "sysctl", "-qw", key).CombinedOutput(); err != nil {
			t.Fatalf("netnstest: sysctl %s in %s: %v: %s", key, end.ns.Name, err, out)
		}
		end.ns.IP(t, "link", "set", end.name, "up")
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("netnstest: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Do runs fn on an OS thread switched into the namespace, so that sockets
// fn opens (listeners, dials) live there; they stay there after Do
// returns, whichever thread later uses them.
func (ns *Namespace) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns.Name)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns.Name, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and dies with its goroutine.
		return fmt.Errorf("setns back from %s: %w", ns.Name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}
