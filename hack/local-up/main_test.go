package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// TestMakeRun runs the program behind `make run` as a user would: it comes
// up, the examples become Ready, a lease is acquired and released over
// HTTP, and Ctrl-C (SIGINT) stops everything it started.
func TestMakeRun(t *testing.T) {
	integration.Needs(t, testenv.Needs+", curl from Debian (`make deps`), and local-up run as a process")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "github.com/proxyfleet/proxy-operator/hack/local-up", "github.com/proxyfleet/proxy-operator/cmd/forward-proxy",
		"github.com/proxyfleet/proxy-operator/examples/crawler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building local-up and forward-proxy: %v\n%s", err, out)
	}
	dir := t.TempDir()
	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	leaseAddr, targetAddr, gatewayAddr := addr(), addr(), addr()
	cmd := exec.Command(filepath.Join(bin, "local-up"),
		"--dir", dir, "--examples", "../../examples",
		"--target-addr", targetAddr, "--external-proxy-addr", addr(),
		"--lease-addr", leaseAddr, "--metrics-addr", addr(), "--gateway-listen", gatewayAddr, "--gateway-metrics-addr", addr(), "--v=2")
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("local-up output:\n%s", out.String())
		}
	})

	// The examples become Ready.
	var crawl *versioned.Clientset
	poll(t, 3*time.Minute, "the examples are Ready", func() (bool, string) {
		if crawl == nil {
			config, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
			if err != nil {
				return false, err.Error()
			}
			crawl = versioned.NewForConfigOrDie(config)
		}
		list, err := crawl.CrawlV1alpha1().Proxies("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		phases := map[string]crawlv1alpha1.ProxyPhase{}
		ready, members, readyMembers := 0, 0, 0
		for _, p := range list.Items {
			phases[p.Name] = p.Status.Phase
			isMember := p.Labels[crawlv1alpha1.PoolLabel] == "dev-pool"
			if isMember {
				members++
			}
			if p.Status.Phase == crawlv1alpha1.PhaseReady {
				if isMember {
					readyMembers++
				} else {
					ready++
				}
			}
		}
		// Three standalone examples and the three members of examples/pool.yaml.
		pool, err := crawl.CrawlV1alpha1().ProxyPools("default").Get(context.Background(), "dev-pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ready == 3 && len(list.Items) == 6 && members == 3 && readyMembers == 3 && pool.Status.ReadyReplicas == 3,
			fmt.Sprintf("phases %v, pool status %+v", phases, pool.Status)
	})

	// It says which step it is on, with the seconds since it started, up
	// to the first Ready proxy.
	poll(t, time.Minute, "local-up says a proxy is Ready", func() (bool, string) {
		return strings.Contains(out.String(), "s] first Ready proxy: default/"), `no line "local-up: [Ns] first Ready proxy: default/..."`
	})
	for _, step := range []string{"starting etcd and kube-apiserver", "etcd and kube-apiserver ready", "target, external proxy and examples created"} {
		if !strings.Contains(out.String(), "s] "+step) {
			t.Errorf("local-up's output lacks the step %q", step)
		}
	}

	// The dashboard whose address it prints, open under --lease-auth=none:
	// the pool, as the page's stream would show it.
	if !strings.Contains(out.String(), "Dashboard: http://"+leaseAddr+"/ui/") {
		t.Errorf("local-up does not print the dashboard's address http://%s/ui/", leaseAddr)
	}
	poll(t, time.Minute, "the dashboard shows dev-pool 3 of 3 Ready", func() (bool, string) {
		resp, err := http.Get("http://" + leaseAddr + "/ui/api/view")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var view struct {
			View struct {
				Pools []struct {
					Namespace, Name string
					Desired, Ready  int
				} `json:"pools"`
			} `json:"view"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
			return false, fmt.Sprintf("status %d: %v", resp.StatusCode, err)
		}
		for _, p := range view.View.Pools {
			if p.Namespace == "default" && p.Name == "dev-pool" {
				return p.Desired == 3 && p.Ready == 3, fmt.Sprintf("dev-pool %+v", p)
			}
		}
		return false, fmt.Sprintf("no dev-pool in %+v", view.View.Pools)
	})

	// A lease over HTTP: acquire on a dev-pool proxy, then release.
	var granted struct {
		ID    string `json:"id"`
		Proxy struct {
			Name string `json:"name"`
			URL  string `json:"url"`
		} `json:"proxy"`
	}
	poll(t, time.Minute, "a lease is granted", func() (bool, string) {
		resp, err := http.Post("http://"+leaseAddr+"/v1/leases", "application/json",
			strings.NewReader(`{"holder":"test","namespace":"default","selector":"pool=dev","ttl":"30s"}`))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return false, fmt.Sprintf("status %d", resp.StatusCode)
		}
		return json.NewDecoder(resp.Body).Decode(&granted) == nil, "bad body"
	})
	if !strings.HasPrefix(granted.Proxy.Name, "local-") || !strings.HasPrefix(granted.Proxy.URL, "http://127.0.0.1:") {
		t.Errorf("lease on %+v, want a local-provider proxy on loopback", granted.Proxy)
	}
	req, _ := http.NewRequest(http.MethodDelete, "http://"+leaseAddr+"/v1/leases/"+granted.ID+"?outcome=ok", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		t.Errorf("release answered %d", resp.StatusCode)
	}

	// The crawler example does a round through a leased proxy.
	crawler := exec.Command(filepath.Join(bin, "crawler"), "--lease-api", "http://"+leaseAddr,
		"--url", "https://"+targetAddr+"/generate_204", "--insecure", "--rounds", "1")
	if out, err := crawler.CombinedOutput(); err != nil || !strings.Contains(string(out), "204 No Content") {
		t.Errorf("crawler example: %v\n%s", err, out)
	}

	// curl through the gateway, as the printed next steps say.
	gatewayCurl := exec.Command("curl", "-sk", "-x", "http://ns-default+session-1:none@"+gatewayAddr,
		"https://"+targetAddr+"/generate_204", "-o", "/dev/null", "-w", "%{http_code}")
	if out, err := gatewayCurl.CombinedOutput(); err != nil || string(out) != "204" {
		t.Errorf("curl through the gateway: %v %q", err, out)
	}

	// Every process it started, before Ctrl-C.
	pids := children(t, cmd.Process.Pid)
	pids = append(pids, instancePIDs(t, filepath.Join(dir, "instances"))...)
	if len(pids) < 7 { // etcd, kube-apiserver, two local proxies, three pool members
		t.Fatalf("found only processes %v to watch", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("local-up exited with %v after SIGINT", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("local-up did not exit within a minute of SIGINT")
	}
	poll(t, 10*time.Second, "no process left behind", func() (bool, string) {
		var alive []int
		for _, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, pid)
			}
		}
		return len(alive) == 0, fmt.Sprintf("still running: %v", alive)
	})
}

// children lists the direct children of pid (etcd and kube-apiserver). Go
// forks from whichever thread runs, so every thread's list is read.
func children(t *testing.T, pid int) []int {
	t.Helper()
	lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, list := range lists {
		data, err := os.ReadFile(list)
		if err != nil {
			continue // the thread exited
		}
		for _, f := range strings.Fields(string(data)) {
			var p int
			if _, err := fmt.Sscan(f, &p); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// instancePIDs reads the local provider's state files.
func instancePIDs(t *testing.T, stateDir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var state struct {
			PID int `json:"pid"`
		}
		if err := json.Unmarshal(data, &state); err != nil || state.PID == 0 {
			t.Fatalf("state file %s: %v", f, err)
		}
		pids = append(pids, state.PID)
	}
	return pids
}

// processAlive: the pid exists and is not a zombie awaiting its parent.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.Check(t, timeout, 200*time.Millisecond, what, eventually.Holds(cond))
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A Ready status counts from the run's first health check on: one that an
// earlier run left in etcd does not.
func TestReadySince(t *testing.T) {
	start := time.Date(2026, 12, 5, 10, 0, 0, 500_000_000, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(start.Add(d).Truncate(time.Second)); return &t }
	for name, tc := range map[string]struct {
		phase   crawlv1alpha1.ProxyPhase
		checked *metav1.Time
		want    bool
	}{
		"checked in this run":           {crawlv1alpha1.PhaseReady, at(3 * time.Second), true},
		"checked in the start's second": {crawlv1alpha1.PhaseReady, at(0), true},
		"left by an earlier run":        {crawlv1alpha1.PhaseReady, at(-time.Minute), false},
		"never checked":                 {crawlv1alpha1.PhaseReady, nil, false},
		"not Ready":                     {crawlv1alpha1.PhaseProvisioning, at(3 * time.Second), false},
	} {
		px := &crawlv1alpha1.Proxy{Status: crawlv1alpha1.ProxyStatus{Phase: tc.phase, LastHealthCheckTime: tc.checked}}
		if got := readySince(px, start); got != tc.want {
			t.Errorf("%s: readySince = %t, want %t", name, got, tc.want)
		}
	}
}
