//go:build realnode

package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// installChart: helm install as the README tells users, with make image's
// image and 2 replicas; both Pods Running and Ready (their probes pass, no
// restarts), exactly one leader, and /metrics scraped from a Pod.
func installChart(t *testing.T, s *suite) {
	began := time.Now()
	s.installedAt = began
	s.run(t, "helm", "install", release, filepath.Join(s.root, "artifacts", "helm", "proxy-operator"),
		"--namespace", operatorNamespace, "--create-namespace",
		"--set", "replicaCount=2", "--wait", "--timeout=3m")
	var leader string
	waitFor(t, 2*time.Minute, "two Ready operator Pods and one leader", func(ctx context.Context) error {
		pods, ready, l, err := s.operatorPods(ctx)
		switch {
		case err != nil:
			return err
		case len(pods) != 2 || ready != 2:
			return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
		case l == "":
			return errors.New("no leader yet")
		}
		leader = l
		return nil
	})
	t.Logf("helm install → two Ready Pods and leader %s: %s", leader, time.Since(began).Round(100*time.Millisecond))
	s.report.add("helm install → two Ready operator Pods, one leader", time.Since(began))

	pods, _, _, err := s.operatorPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		c := p.Spec.Containers[0]
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("%s: readiness probe %v, liveness probe %v; the chart sets both", p.Name, c.ReadinessProbe != nil, c.LivenessProbe != nil)
		}
		if st := p.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 || !strings.HasPrefix(st[0].ContainerID, "containerd://") {
			t.Errorf("%s: container statuses %+v, want one started by containerd with no restart", p.Name, st)
		}
		if got, want := c.Image, "ghcr.io/proxyfleet/proxy-operator:"+s.version; got != want {
			t.Errorf("%s: image %s, want %s", p.Name, got, want)
		}
	}
	// Scraped as Prometheus would: the Pod's address and the metrics port.
	body, err := curl("http://" + net.JoinHostPort(pods[0].Status.PodIP, "9090") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"proxy_operator_build_info{", "proxy_operator_leader "} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics of %s lack %q", pods[0].Name, want)
		}
	}
}
