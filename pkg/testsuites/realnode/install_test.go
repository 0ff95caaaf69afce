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
// image and the chart's defaults (three replicas, the lease store
// replicated with Raft); every Pod Running and Ready (their probes pass, no
// restarts), exactly one replica leading the lease store with three voters,
// exactly one holding the controllers' Lease, and /metrics scraped from a
// Pod.
func installChart(t *testing.T, s *suite) {
	began := time.Now()
	s.installedAt = began
	s.run(t, "helm", "install", release, filepath.Join(s.root, "artifacts", "helm", "proxy-operator"),
		"--namespace", operatorNamespace, "--create-namespace", "--wait", "--timeout=3m")
	var leader, storeLeader string
	waitFor(t, 2*time.Minute, "three Ready operator Pods, one leader", func(ctx context.Context) error {
		pods, ready, l, err := s.operatorPods(ctx)
		switch {
		case err != nil:
			return err
		case len(pods) != replicas || ready != replicas:
			return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
		case l == "":
			return errors.New("no leader yet")
		}
		p, voters, err := s.raftLeader(ctx)
		if err != nil {
			return err
		}
		switch {
		case voters != replicas:
			return fmt.Errorf("the lease store's leader %s counts %d voters", p.Name, voters)
		case p.Name != l:
			// The controllers run where the store is decided.
			return fmt.Errorf("%s holds the controllers' Lease, %s leads the lease store", l, p.Name)
		}
		leader, storeLeader = l, p.Name
		return nil
	})
	t.Logf("helm install → three Ready Pods, %s leading the lease store and %s the controllers: %s", storeLeader, leader, time.Since(began).Round(100*time.Millisecond))
	s.report.add("helm install → three Ready operator Pods, one leader, three voters", time.Since(began))

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
