//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// upgradeRolls: helm upgrade to an operator image rebuilt under another tag
// (its binary stamped with that version), under crawler load: an acquire
// through the leases Service every 50 ms (each released), a lease renewed
// every 100 ms, and a tunnel through the gateway Service carrying a request
// every 200 ms. It rolls the operator's Pods one at a time (Ready never
// below a quorum, sampled every 250ms; each leader hands the lease store
// over before it stops), no lease call is answered Recovering, the tunnel
// is never cut, every Pod then runs the new build, and the lease granted
// before renews after. The answers and the longest time without a grant
// are reported.
func upgradeRolls(t *testing.T, s *suite) {
	tag := s.version + "-e2e-upgrade"
	s.buildAndImport(t, tag)

	load := s.startLeaseLoad(t)
	tunnel := s.openTunnel(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	minReady := replicas
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, ready, _, err := s.operatorPods(ctx); err == nil && ready < minReady {
				minReady = ready
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	began := time.Now()
	s.run(t, "helm", "upgrade", release, filepath.Join(s.root, "artifacts", "helm", "proxy-operator"),
		"--namespace", operatorNamespace, "--reuse-values", "--set", "image.tag="+tag, "--wait", "--timeout=3m")
	stop()
	wg.Wait()
	ended := time.Now()
	// A second more of load, for the calls the last Pod's going may touch.
	waitFor(t, time.Minute, "a grant after the rollout", func(context.Context) error {
		if _, ok := load.first("acquire", http.StatusCreated, ended.Add(time.Second)); !ok {
			return fmt.Errorf("none yet; answers since the rollout: %s", formatTally(load.tally(ended, time.Now())))
		}
		return nil
	})
	load.stop()
	through, cut := tunnel.close()
	t.Logf("helm upgrade → rolled: %s, fewest Ready Pods on the way: %d", ended.Sub(began).Round(100*time.Millisecond), minReady)
	t.Logf("lease calls sent during the upgrade: %s; longest time without a grant: %v; requests through the tunnel: %d",
		formatTally(load.tally(began, ended)), load.longestGap(began, ended).Round(time.Millisecond), through)
	s.report.add("helm upgrade under crawler load → three Pods rolled to the new tag", ended.Sub(began))
	s.report.addExact("helm upgrade under crawler load: longest time without a grant through the leases Service", load.longestGap(began, ended))
	if minReady < quorum {
		t.Errorf("Ready operator Pods fell to %d during the rollout, below a quorum of %d", minReady, quorum)
	}
	if n := load.count("Recovering", began, ended); n > 0 {
		t.Errorf("%d lease calls answered 503 Recovering during the upgrade", n)
	}
	if cut != nil {
		t.Errorf("the tunnel through the gateway was cut after %d requests, at %v into the upgrade: %v", through, tunnel.at.Sub(began).Round(time.Millisecond), cut)
	}
	pods, _, _, err := s.operatorPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if want := "ghcr.io/proxyfleet/proxy-operator:" + tag; p.Spec.Containers[0].Image != want {
			t.Errorf("%s runs %s after the upgrade, want %s", p.Name, p.Spec.Containers[0].Image, want)
		}
		metrics, err := curl("http://" + net.JoinHostPort(p.Status.PodIP, "9090") + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if want := `proxy_operator_build_info{version="` + tag + `+`; !strings.Contains(metrics, want) {
			t.Errorf("%s: its metrics lack %s...: not the rebuilt binary", p.Name, want)
		}
	}
	waitFor(t, time.Minute, "the lease renews after the rollout", func(context.Context) error {
		if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
			return &renewError{code, body}
		}
		return nil
	})
	s.removeLoadProxy(t)
}

// buildAndImport builds the operator's image with tag, as make image does,
// and imports it into the node's containerd.
func (s *suite) buildAndImport(t *testing.T, tag string) {
	t.Helper()
	out := t.TempDir()
	build := exec.Command("go", "run", "-C", filepath.Join(s.root, "hack", "image"), ".",
		"--repo", s.root, "--out", out, "--images", "proxy-operator", "--tag", tag)
	build.Env = append(os.Environ(), "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("hack/image --tag %s: %v\n%s", tag, err, b)
	}
	ref := "ghcr.io/proxyfleet/proxy-operator:" + tag
	archive := filepath.Join(out, "proxy-operator.tar")
	if b, err := exec.Command("skopeo", "copy", "--quiet", "oci:"+filepath.Join(out, "proxy-operator")+":"+tag, "docker-archive:"+archive+":"+ref).CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, b)
	}
	s.run(t, "ctr", "--address", filepath.Join(s.root, ".cluster", "containerd", "containerd.sock"), "-n", "k8s.io", "images", "import", archive)
}

type renewError struct {
	code int
	body string
}

func (e *renewError) Error() string { return "renew: " + http.StatusText(e.code) + ": " + e.body }
