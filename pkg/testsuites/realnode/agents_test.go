//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

const nodeName = "proxy-operator-node" // hack/cluster names its node so

// nodeAgentsRestart: the kubelet, containerd, etcd and the API server
// restarted in turn under the running node (issue 37). The proxy containers
// keep running (same container, no restart), no Proxy is replaced or leaves
// Ready, the lease renews (on whichever replica leads: a leader that cannot
// renew its Lease within the renew deadline hands over), and a request
// through the leased proxy still reaches the target.
func nodeAgentsRestart(t *testing.T, s *suite) {
	before := s.instances(t)
	for _, agent := range []string{"kubelet", "containerd", "etcd", "kube-apiserver"} {
		began := time.Now()
		s.run(t, "cluster", "--dir", filepath.Join(s.root, ".cluster"), "--bin", filepath.Join(s.root, "bin"), "restart", agent)
		// The kubelet is back: it renews the node's Lease after the restart,
		// and the Node stays Ready (a runtime that is not back turns it NotReady).
		waitFor(t, time.Minute, "the node's Lease renewed after "+agent+" restarted", func(ctx context.Context) error {
			l, err := s.kube.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(began) {
				return fmt.Errorf("renewed %v", l.Spec.RenewTime)
			}
			node, err := s.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return fmt.Errorf("Node Ready=%s: %s", c.Status, c.Message)
				}
			}
			return nil
		})
		waitFor(t, 2*time.Minute, "every Proxy Ready after "+agent+" restarted", func(ctx context.Context) error {
			proxies, err := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, p := range proxies.Items {
				if p.Status.Phase != crawlv1alpha1.PhaseReady {
					return fmt.Errorf("%s is %s", p.Name, p.Status.Phase)
				}
			}
			return nil
		})
		waitFor(t, time.Minute, "the lease renewing after "+agent+" restarted", func(context.Context) error {
			if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
				return fmt.Errorf("renew: %d %s", code, body)
			}
			return nil
		})
		body, err := curl("-x", s.lease.Proxy.URL, "--proxy-user", s.lease.Credentials.Username+":"+s.lease.Credentials.Password,
			"http://"+net.JoinHostPort(s.echoIP, "8080")+"/")
		if err != nil {
			t.Errorf("through the leased proxy after %s restarted: %v", agent, err)
		}
		t.Logf("%s restarted → every Proxy Ready, lease renewed, request through (%q): %s", agent, body, time.Since(began).Round(100*time.Millisecond))
		s.report.add(agent+" restarted → every Proxy Ready, the lease renews", time.Since(began))
	}
	if diff := cmp.Diff(before, s.instances(t)); diff != "" {
		t.Errorf("instances changed across the restarts (-before +after):\n%s", diff)
	}
}

// instances maps every Proxy of the crawl namespace to its instance, and
// every Pod there to its container and restart count.
func (s *suite) instances(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	proxies, err := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies.Items {
		out["Proxy "+p.Name] = p.Status.ProviderID + " at " + p.Status.IP
	}
	pods, err := s.kube.CoreV1().Pods(crawlNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			out["Pod "+p.Name] = fmt.Sprintf("%s restarts %d", c.ContainerID, c.RestartCount)
		}
	}
	return out
}
