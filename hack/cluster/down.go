package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeChainPrefixes name the iptables chains the node's parts create:
// kube-proxy and the kubelet (KUBE-), the CNI plugins (CNI-), and the
// real-node suite's partition filter (PO-E2E-), should a run die before its
// cleanup.
var nodeChainPrefixes = []string{"KUBE-", "CNI-", "PO-E2E-"}

// down stops the node and removes everything it put on the machine: processes,
// mounts, the bridge, iptables chains, cgroups, sysctls and the folder. It goes
// on past failures and returns them all; then it lists whatever is left.
func down(ctx context.Context, n node) error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Pods deleted through the API first: the kubelet tears their sandboxes down,
	// so CNI releases addresses and its iptables rules.
	keep(deletePods(ctx, n))
	byName := map[string]component{}
	for _, c := range n.components() {
		byName[c.Name] = c
	}
	for _, name := range []string{"kube-router", "kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		keep(stop(n, name, byName[name].Bin, 10*time.Second))
	}
	keep(killContainers(n))
	keep(stop(n, "containerd", byName["containerd"].Bin, 10*time.Second))
	// Components without a pid file (a crash, or an up that lost track of them).
	for _, pid := range strays(n.Dir, componentBins(n)) {
		keep(signalAndWait(pid, 10*time.Second))
	}
	keep(unmountUnder(n.Dir, "/run/containerd", "/var/lib/kubelet"))
	if exec.Command("ip", "link", "show", n.Bridge).Run() == nil {
		keep(run("ip", "link", "delete", n.Bridge))
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		keep(deleteChains(tool, nodeChainPrefixes...))
	}
	// kube-router's ipsets, once no rule refers to them.
	keep(destroyIPSets(nodeIPSets()))
	keep(removeCgroups("kubepods"))
	keep(restoreHost(n))
	keep(os.RemoveAll(n.Dir))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if left := leftovers(n); len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, "; "))
	}
	return nil
}

// deletePods stops the controllers that would recreate Pods and deletes every
// Pod, waiting until the kubelet has confirmed each. Nothing to do when the
// API server is not answering.
func deletePods(ctx context.Context, n node) error {
	client, err := adminClient(n)
	if err != nil {
		return nil
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		return nil
	}
	if _, ok := running(n, "kubelet", n.bin("kubelet")); !ok {
		return nil // no kubelet to confirm: killContainers and the rest clean up
	}
	if err := stop(n, "kube-controller-manager", n.bin("kube-controller-manager"), 10*time.Second); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	grace := int64(2)
	for _, p := range pods.Items {
		_ = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	return poll(ctx, 90*time.Second, func() error {
		left, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(left.Items) > 0 {
			return fmt.Errorf("%d Pods still terminating", len(left.Items))
		}
		return nil
	})
}

// killContainers kills what runs in the Pods' cgroups and the shims of this
// node's containerd (found by the socket address on their command line).
func killContainers(n node) error {
	var pids []int
	for _, root := range cgroupRoots() {
		_ = filepath.WalkDir(filepath.Join(root, "kubepods"), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				pids = append(pids, readPids(path)...)
			}
			return nil
		})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") && slices.Contains(args, n.containerdSocket()) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		if !waitGone(pid, 10*time.Second) {
			return fmt.Errorf("pid %d survived SIGKILL", pid)
		}
	}
	return nil
}

func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mounts returns the mount points under any of prefixes, deepest first.
func mounts(prefixes ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Octal escapes (\040 for a space) do not occur in the node's paths.
		mp := fields[4]
		for _, p := range prefixes {
			if mp == p || strings.HasPrefix(mp, p+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func unmountUnder(prefixes ...string) error {
	var errs []error
	for _, mp := range mounts(prefixes...) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// deleteChains removes the jumps into chains named with prefixes from every
// chain, then flushes and deletes those chains, in the tables kube-proxy and
// the CNI plugins write.
func deleteChains(tool string, prefixes ...string) error {
	if _, err := exec.LookPath(tool); err != nil {
		return nil
	}
	ours := func(chain string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(chain, p) })
	}
	var errs []error
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command(tool, "-w", "-t", table, "-S").Output()
		if err != nil {
			continue
		}
		var chains []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "-N" && ours(f[1]):
				chains = append(chains, f[1])
			case len(f) >= 2 && f[0] == "-A" && !ours(f[1]) && jumpsTo(f, ours):
				// Fields are unquoted as -S prints them; the comments kube-proxy
				// adds are quoted, so delete by the rule's position instead.
				errs = append(errs, deleteRule(tool, table, f[1], line))
			}
		}
		for _, c := range chains {
			_ = exec.Command(tool, "-w", "-t", table, "-F", c).Run()
		}
		for _, c := range chains {
			if out, err := exec.Command(tool, "-w", "-t", table, "-X", c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", tool, table, c, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

func jumpsTo(fields []string, ours func(string) bool) bool {
	for i := 0; i+1 < len(fields); i++ {
		if (fields[i] == "-j" || fields[i] == "-g") && ours(fields[i+1]) {
			return true
		}
	}
	return false
}

// deleteRule deletes rule (a -S line) from chain by its current position.
func deleteRule(tool, table, chain, rule string) error {
	out, err := exec.Command(tool, "-w", "-t", table, "-S", chain).Output()
	if err != nil {
		return err
	}
	// Line 0 is the chain's policy (-P) or creation (-N); rule k is at position k.
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == rule {
			return run(tool, "-w", "-t", table, "-D", chain, strconv.Itoa(i))
		}
	}
	return nil
}

// cgroupRoots are the mounted cgroup hierarchies (v1 controllers and v2).
func cgroupRoots() []string {
	var roots []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		_, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(after); len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			roots = append(roots, strings.Fields(line)[4])
		}
	}
	return roots
}

// removeCgroups removes the kubelet's cgroup tree in every hierarchy, leaves first.
func removeCgroups(name string) error {
	var errs []error
	for _, root := range cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, name), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// leftovers lists what down should have removed and did not.
func leftovers(n node) []string {
	var left []string
	for _, c := range n.components() {
		if pid, ok := running(n, c.Name, c.Bin); ok {
			left = append(left, fmt.Sprintf("process %s (pid %d)", c.Name, pid))
		}
	}
	for _, pid := range strays(n.Dir, componentBins(n)) {
		left = append(left, fmt.Sprintf("process pid %d (a component naming %s)", pid, n.Dir))
	}
	for _, mp := range mounts(n.Dir, "/run/containerd", "/var/lib/kubelet") {
		left = append(left, "mount "+mp)
	}
	if exec.Command("ip", "link", "show", n.Bridge).Run() == nil {
		left = append(left, "interface "+n.Bridge)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, _ := exec.Command(tool, "-w", "-t", table, "-S").Output()
			for _, line := range strings.Split(string(out), "\n") {
				chain, ok := strings.CutPrefix(line, "-N ")
				if ok && slices.ContainsFunc(nodeChainPrefixes, func(p string) bool { return strings.HasPrefix(chain, p) }) {
					left = append(left, fmt.Sprintf("%s -t %s chain %s", tool, table, strings.Fields(line)[1]))
				}
			}
		}
	}
	for _, set := range nodeIPSets() {
		left = append(left, "ipset "+set)
	}
	for _, root := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, "kubepods")); err == nil {
			left = append(left, "cgroup "+filepath.Join(root, "kubepods"))
		}
	}
	if _, err := os.Stat(n.Dir); err == nil {
		left = append(left, "folder "+n.Dir)
	}
	return left
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// nodeIPSets lists the ipsets kube-router made: its network policy
// controller names them KUBE-SRC-*, KUBE-DST-* and kube-router-*, and their
// IPv6 twins with an "inet6:" prefix.
func nodeIPSets() []string {
	if _, err := exec.LookPath("ipset"); err != nil {
		return nil
	}
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return nil
	}
	var sets []string
	for _, name := range strings.Fields(string(out)) {
		bare := strings.TrimPrefix(name, "inet6:")
		if strings.HasPrefix(bare, "KUBE-") || strings.HasPrefix(bare, "kube-router-") {
			sets = append(sets, name)
		}
	}
	return sets
}

func destroyIPSets(sets []string) error {
	var errs []error
	for _, set := range sets {
		errs = append(errs, run("ipset", "destroy", set))
	}
	return errors.Join(errs...)
}

// componentBins are the binaries of the node's processes.
func componentBins(n node) []string {
	var bins []string
	for _, c := range n.components() {
		bins = append(bins, c.Bin)
	}
	return bins
}
