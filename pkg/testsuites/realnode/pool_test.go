//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

const pool = "rot"

// poolRotates: a ProxyPool of 3 kubernetes-provider members rotates its
// cloud-init Secret with maxUnavailable 1 on real Pod start times, Ready
// members never below 2 (sampled every second); then kubectl scale 3 → 0 → 2.
func poolRotates(t *testing.T, s *suite) {
	s.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: rot-cloud-init, namespace: %[1]s}
stringData: {user-data: "#cloud-config\n# first\n"}
---
apiVersion: crawl.proxyfleet.io/v1alpha1
kind: ProxyPool
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: 3
  template:
    spec:
      provider: kubernetes
      kubernetes: {port: 3128}
      cloudInit: {secretRef: {name: rot-cloud-init}}
      egress: {allowCIDRs: [10.244.0.0/16]}
      healthCheck: {url: "http://%[3]s/", expectedStatus: 200, interval: 3s, timeout: 2s}
  strategy: {maxSurge: 0, maxUnavailable: 1}
`, crawlNamespace, pool, net.JoinHostPort(s.echoIP, "8080")))
	first := s.waitPoolReady(t, 3)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	minReady, samples := 3, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if ready, err := s.readyMembers(ctx); err == nil {
				minReady, samples = min(minReady, len(ready)), samples+1
			}
			time.Sleep(time.Second)
		}
	}()
	began := time.Now()
	s.run(t, "kubectl", "patch", "secret", "rot-cloud-init", "-n", crawlNamespace, "--type=merge",
		"-p", `{"stringData":{"user-data":"#cloud-config\n# rotated\n"}}`)
	waitFor(t, 3*time.Minute, "every member replaced and Ready", func(ctx context.Context) error {
		ready, err := s.readyMembers(ctx)
		if err != nil {
			return err
		}
		replaced := 0
		for uid := range ready {
			if !first[uid] {
				replaced++
			}
		}
		if replaced != 3 {
			return fmt.Errorf("%d of 3 Ready members are new", replaced)
		}
		return nil
	})
	stop()
	wg.Wait()
	t.Logf("Secret rotated → 3 new Ready members: %s; fewest Ready members in %d samples: %d",
		time.Since(began).Round(100*time.Millisecond), samples, minReady)
	s.report.add("pool of 3 rotates its Secret (maxUnavailable 1) → 3 new Ready members", time.Since(began))
	if minReady < 2 {
		t.Errorf("Ready members fell to %d during the rotation (maxUnavailable 1 of 3)", minReady)
	}

	s.run(t, "kubectl", "scale", "proxypool/"+pool, "-n", crawlNamespace, "--replicas=0")
	waitFor(t, 2*time.Minute, "no members and no member Pods", func(ctx context.Context) error {
		proxies, err := s.members(ctx)
		if err != nil {
			return err
		}
		pods, err := s.kube.CoreV1().Pods(crawlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(proxies) > 0 || len(pods.Items) > 1 { // the edge Proxy's Pod stays
			return fmt.Errorf("%d members, %d Pods in %s", len(proxies), len(pods.Items), crawlNamespace)
		}
		return nil
	})
	s.run(t, "kubectl", "scale", "proxypool/"+pool, "-n", crawlNamespace, "--replicas=2")
	s.waitPoolReady(t, 2)
}

// waitPoolReady waits for n Ready members and returns their UIDs.
func (s *suite) waitPoolReady(t *testing.T, n int) map[string]bool {
	t.Helper()
	var ready map[string]bool
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d Ready members", n), func(ctx context.Context) error {
		var err error
		if ready, err = s.readyMembers(ctx); err != nil {
			return err
		}
		if len(ready) != n {
			return fmt.Errorf("%d Ready members", len(ready))
		}
		return nil
	})
	return ready
}

func (s *suite) members(ctx context.Context) ([]crawlv1alpha1.Proxy, error) {
	list, err := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolLabel + "=" + pool})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// readyMembers returns the UIDs of the pool's Ready members.
func (s *suite) readyMembers(ctx context.Context) (map[string]bool, error) {
	proxies, err := s.members(ctx)
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, p := range proxies {
		if p.Status.Phase == crawlv1alpha1.PhaseReady && p.DeletionTimestamp == nil {
			ready[string(p.UID)] = true
		}
	}
	return ready, nil
}
