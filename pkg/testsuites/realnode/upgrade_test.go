//go:build realnode

package realnode

import (
	"context"
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
// (its binary stamped with that version) rolls the operator's Pods one at a
// time (Ready never below one, sampled every 250ms), every Pod then runs the
// new build, and the lease granted before renews after.
func upgradeRolls(t *testing.T, s *suite) {
	tag := s.version + "-e2e-upgrade"
	s.buildAndImport(t, tag)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	minReady := 2
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
	t.Logf("helm upgrade → rolled: %s, fewest Ready Pods on the way: %d", time.Since(began).Round(100*time.Millisecond), minReady)
	s.report.add("helm upgrade → both Pods rolled to the new tag", time.Since(began))
	if minReady < 1 {
		t.Errorf("Ready operator Pods fell to %d during the rollout", minReady)
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
