package operatortest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// LocalInstance is one state file of the local provider (--local-state-dir).
type LocalInstance struct {
	ID       string `json:"id"`
	PID      int    `json:"pid"`
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	SpecHash string `json:"specHash"`
}

// LocalInstances reads the local provider's state directory; a file removed
// while it reads is passed over.
func LocalInstances(t testing.TB, stateDir string) []LocalInstance {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []LocalInstance
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var inst LocalInstance
		if err := json.Unmarshal(data, &inst); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, inst)
	}
	return out
}

// ForwardProxyProcesses lists, in order, the live processes of the
// cmd/forward-proxy built beside operatorBinary (Shared.Run builds it) that
// the local provider started for stateDir (its --local-state-dir), found
// in /proc whatever any state file says: a process that no state file names
// is a leaked instance. The local provider runs each instance in its state
// directory, so tests with directories of their own can run in parallel
// without seeing each other's instances.
func ForwardProxyProcesses(t testing.TB, operatorBinary, stateDir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(filepath.Dir(operatorBinary), "forward-proxy")
	// The kernel shows a working directory with its symlinks resolved.
	dir, err := filepath.EvalSymlinks(stateDir)
	if err != nil {
		dir = filepath.Clean(stateDir) // removed already
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != want {
			continue // gone meanwhile, or not ours
		}
		if !inDir(pid, dir) || Zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// inDir reports whether pid's working directory is dir (clean, symlinks
// resolved), also after dir was removed (the kernel then shows it with
// " (deleted)").
func inDir(pid int, dir string) bool {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && strings.TrimSuffix(cwd, " (deleted)") == dir
}

// Zombie reports whether pid has exited (and waits for its parent to reap
// it), or is gone.
func Zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || strings.HasPrefix(strings.TrimSpace(string(data[i+1:])), "Z")
}

// KillForwardProxies ends every process ForwardProxyProcesses lists for
// stateDir: the local provider's instances are detached and would outlive
// a failed test.
func KillForwardProxies(t testing.TB, operatorBinary, stateDir string) {
	// Until none is left: a process can still be starting (an operator's
	// last Create) while the first ones die, and the next test counts them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := eventually.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		pids := ForwardProxyProcesses(t, operatorBinary, stateDir)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) > 0 {
			return fmt.Errorf("forward-proxy processes %v still run", pids)
		}
		return nil
	})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
	}
}

// LocalLeaks is nil when the local instances in stateDir are exactly those
// the members name, each with its live process, and no other forward-proxy
// process runs for stateDir.
func LocalLeaks(t testing.TB, members []crawlv1alpha1.Proxy, stateDir, operatorBinary string) error {
	t.Helper()
	var want, got []string
	var pids []int
	for _, m := range members {
		_, id, _ := provider.SplitProviderID(m.Status.ProviderID)
		want = append(want, id)
	}
	for _, inst := range LocalInstances(t, stateDir) {
		got = append(got, inst.ID)
		pids = append(pids, inst.PID)
	}
	slices.Sort(want)
	slices.Sort(got)
	slices.Sort(pids)
	if !slices.Equal(want, got) {
		return fmt.Errorf("instances %v, the members name %v", got, want)
	}
	if live := ForwardProxyProcesses(t, operatorBinary, stateDir); !slices.Equal(live, pids) {
		return fmt.Errorf("forward-proxy processes %v, the instances' are %v", live, pids)
	}
	return nil
}
