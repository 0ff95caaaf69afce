//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// uninstallLeavesNothing follows docs/operations.md ("Uninstalling"): delete
// the Proxies (the operator's finalizers delete their Pods, Secrets and
// NetworkPolicies), helm uninstall, delete the namespace. The CRDs stay, as
// helm leaves what a chart's crds/ installed.
func uninstallLeavesNothing(t *testing.T, s *suite) {
	s.run(t, "kubectl", "delete", "proxypools,proxies", "--all", "-n", crawlNamespace, "--timeout=90s")
	s.run(t, "helm", "uninstall", release, "-n", operatorNamespace, "--wait", "--timeout=90s")
	s.run(t, "kubectl", "delete", "namespace", operatorNamespace, "--timeout=90s")
	waitFor(t, time.Minute, "nothing of the proxies left", func(ctx context.Context) error {
		pods, err := s.kube.CoreV1().Pods(crawlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		secrets, err := s.kube.CoreV1().Secrets(crawlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		policies, err := s.kube.NetworkingV1().NetworkPolicies(crawlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var left []string
		for _, p := range pods.Items {
			left = append(left, "Pod "+p.Name)
		}
		for _, sec := range secrets.Items {
			if sec.Name != "rot-cloud-init" { // the user's own, which the pool read
				left = append(left, "Secret "+sec.Name)
			}
		}
		for _, p := range policies.Items {
			left = append(left, "NetworkPolicy "+p.Name)
		}
		if len(left) > 0 {
			return fmt.Errorf("left in %s: %s", crawlNamespace, strings.Join(left, ", "))
		}
		return nil
	})
	if _, err := s.try("kubectl", "get", "crd", "proxies.crawl.proxyfleet.io"); err != nil {
		t.Errorf("the Proxy CRD is gone after helm uninstall: %v (the chart's policy keeps it)", err)
	}
}
