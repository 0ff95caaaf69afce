//go:build realnode

package realnode

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// upgradeRolls: helm upgrade to the image under another tag rolls the
// operator's Pods one at a time (Ready never below one, sampled every 250ms)
// and the lease granted before renews after.
func upgradeRolls(t *testing.T, s *suite) {
	tag := s.version + "-upgrade"
	s.run(t, "ctr", "--address", filepath.Join(s.root, ".cluster", "containerd", "containerd.sock"), "-n", "k8s.io",
		"images", "tag", "--force", "ghcr.io/proxyfleet/proxy-operator:"+s.version, "ghcr.io/proxyfleet/proxy-operator:"+tag)

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
	}
	waitFor(t, time.Minute, "the lease renews after the rollout", func(context.Context) error {
		if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
			return &renewError{code, body}
		}
		return nil
	})
}

type renewError struct {
	code int
	body string
}

func (e *renewError) Error() string { return "renew: " + http.StatusText(e.code) + ": " + e.body }
