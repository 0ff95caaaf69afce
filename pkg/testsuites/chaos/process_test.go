package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// pollInterval is how often the process tests look again; every wait has a
// deadline.
const pollInterval = 100 * time.Millisecond

// startOperator runs the operator binary on ns (its Proxies and its leader
// Lease) with extra flags, the lease API without authentication.
func startOperator(t *testing.T, name, ns string, extra ...string) *operatortest.Process {
	t.Helper()
	return operatortest.StartOnNamespace(t, env, operatorBinary, name, ns, "CHAOS_LOGS", append([]string{"--lease-auth=none"}, extra...)...)
}

// fastHealthCheck probes every second through the proxy to target (a
// loopback server: the default URL is on the internet).
func fastHealthCheck(target string) crawlv1alpha1.HealthCheck {
	return crawlv1alpha1.HealthCheck{
		URL:      target + "/generate_204",
		Interval: &metav1.Duration{Duration: time.Second},
		Timeout:  &metav1.Duration{Duration: 900 * time.Millisecond},
	}
}

// clients are admin clients of env.
func clients() (kubernetes.Interface, versioned.Interface) {
	return kubernetes.NewForConfigOrDie(env.Config), versioned.NewForConfigOrDie(env.Config)
}

// newNamespace creates a namespace named after the test.
func newNamespace(t *testing.T) string {
	t.Helper()
	kube, _ := clients()
	return operatortest.NewNamespace(t, kube)
}

// localInstance is what the local provider records about an instance (its
// state file, pkg/provider/local).
type localInstance struct {
	ID       string `json:"id"`
	PID      int    `json:"pid"`
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	SpecHash string `json:"specHash"`
}

// localInstances reads the local provider's state directory.
func localInstances(t *testing.T, stateDir string) []localInstance {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []localInstance
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var inst localInstance
		if err := json.Unmarshal(data, &inst); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, inst)
	}
	return out
}

// forwardProxyBinary is cmd/forward-proxy as built beside the operator: the
// program of every local instance.
func forwardProxyBinary() string {
	return filepath.Join(filepath.Dir(operatorBinary), "forward-proxy")
}

// forwardProxyProcesses lists the running processes of forwardProxyBinary,
// found in /proc whatever any state file says: a process that no state file
// names is a leaked instance.
func forwardProxyProcesses(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := forwardProxyBinary()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != want {
			continue // gone meanwhile, or not ours
		}
		if zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// zombie reports whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || strings.HasPrefix(strings.TrimSpace(string(data[i+1:])), "Z")
}

// killForwardProxies ends every process of forwardProxyBinary: the local
// provider's instances are detached and would outlive a failed test.
func killForwardProxies(t *testing.T) {
	// Until none is left: a process can still be starting (an operator's
	// last Create) while the first ones die, and the next test counts them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := eventually.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		pids := forwardProxyProcesses(t)
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
