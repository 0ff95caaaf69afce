//go:build realnode

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The memory-pressure step's sizes: the kubelet's threshold is set this far
// below the memory the node has available when the step begins, and the hog
// then holds hogMiB, so the node is short by about their difference. The
// margin absorbs what the rest of the machine does meanwhile.
const (
	pressureMarginMiB = 600
	hogMiB            = 1200
	// hogHeadroomMiB is how far the hog's request exceeds what it holds:
	// the kubelet counts its runtime and page cache too, and a hog over its
	// request would be ranked before the leader.
	hogHeadroomMiB = 512
	// undersizedRequest is the leader's memory request in this step, set in
	// place: below its working set (the kubelet's measure; ~14 MiB for the
	// suite's three proxies, well under the ~36 MiB RSS docs/benchmarks.md
	// shows idle), as for a fleet that outgrew the request the chart sized.
	undersizedRequest = "4Mi"
	// hogPriorityClass ranks the hog after every Pod over its request and before
	// every other: the kubelet evicts the leader, then the hog, which ends
	// the pressure, and nothing else.
	hogPriorityClass = "e2e-memory-hog"
)

// operatorEvicted (issue 37): the operator's leader, using more memory than
// it requested, is what the kubelet evicts first when the node runs short.
// The node is made short for real: a kubelet threshold just under what is
// available (a drop-in and a restart, both undone) and a Pod that holds
// memory within its own request, at a priority below everything else's. After
// the eviction: another replica leads and renews the lease, the Deployment
// brings back three Ready replicas, and nothing else was evicted: no proxy replaced or
// restarted, the gateways and the target untouched.
func operatorEvicted(t *testing.T, s *suite) {
	_, _, leader, err := s.operatorPods(context.Background())
	if err != nil || leader == "" {
		t.Fatalf("leader before: %q, %v", leader, err)
	}
	s.resizeMemoryRequest(t, leader, undersizedRequest)
	before := s.instances(t)
	available := s.nodeMemoryAvailable(t)
	threshold := available>>20 - pressureMarginMiB
	s.setKubeletEviction(t, fmt.Sprintf("memory.available: %dMi", threshold))
	s.startHog(t)

	began := time.Now()
	var evicted []string
	waitFor(t, 3*time.Minute, "the leader and the hog evicted", func(ctx context.Context) error {
		evicted = nil
		for _, ns := range []string{operatorNamespace, crawlNamespace, targetNamespace} {
			pods, err := s.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if _, ok := evictedBecause(p); ok {
					evicted = append(evicted, ns+"/"+p.Name)
				}
			}
		}
		// The hog goes last: its eviction ends the pressure.
		if !slices.Contains(evicted, targetNamespace+"/hog") {
			return fmt.Errorf("evicted so far: %v (threshold %d MiB, %d MiB available before the hog)", evicted, threshold, available>>20)
		}
		return nil
	})
	slices.Sort(evicted)
	if want := []string{operatorNamespace + "/" + leader, targetNamespace + "/hog"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want exactly %v; the kubelet ranked:\n%s", evicted, want, s.kubeletRankings(t))
	}
	leaderPod, err := s.kube.CoreV1().Pods(operatorNamespace).Get(context.Background(), leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	why, _ := evictedBecause(*leaderPod)
	t.Logf("evicted %v after %s: %s", evicted, time.Since(began).Round(100*time.Millisecond), why)
	if !strings.Contains(why, "memory") {
		t.Errorf("the leader's eviction message %q does not name memory", why)
	}

	waitFor(t, 3*time.Minute, "a leader renewing the lease and three Ready replicas", func(ctx context.Context) error {
		if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
			return fmt.Errorf("renew: %d %s", code, body)
		}
		pods, ready, now, err := s.operatorPods(ctx)
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running != replicas || ready != replicas || now == "" || now == leader {
			return fmt.Errorf("%d running, %d Ready, leader %q", running, ready, now)
		}
		return nil
	})
	t.Logf("leader evicted under memory pressure → a new leader renews, three Ready replicas: %s", time.Since(began).Round(100*time.Millisecond))
	s.report.add("leader Pod evicted under memory pressure → a new leader renews, three Ready replicas", time.Since(began))
	if diff := cmp.Diff(before, s.instances(t)); diff != "" {
		t.Errorf("proxies changed across the eviction (-before +after):\n%s", diff)
	}
	// An evicted Pod stays, terminated, until someone deletes it; the next
	// steps count the operator's Pods.
	s.run(t, "kubectl", "delete", "pod", leader, "-n", operatorNamespace, "--ignore-not-found")
}

// evictedBecause says whether the kubelet evicted p, and why. A container
// that exits 0 on the eviction's SIGTERM (the operator does) leaves the Pod
// Completed, not Failed with reason Evicted; its DisruptionTarget condition
// tells either way.
func evictedBecause(p corev1.Pod) (string, bool) {
	if p.Status.Reason == "Evicted" {
		return p.Status.Message, true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "TerminationByKubelet" {
			return c.Message, true
		}
	}
	return "", false
}

// kubeletRankings are the kubelet's log lines that rank Pods for eviction.
func (s *suite) kubeletRankings(t *testing.T) string {
	log, err := os.ReadFile(filepath.Join(s.root, ".cluster", "logs", "kubelet.log"))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "pods ranked for eviction") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// resizeMemoryRequest sets a running Pod's memory request in place (the
// resize subresource: no restart) and waits until the kubelet applied it.
func (s *suite) resizeMemoryRequest(t *testing.T, pod, request string) {
	t.Helper()
	p, err := s.kube.CoreV1().Pods(operatorNamespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"resources":{"requests":{"cpu":%q,"memory":%q}}}]}}`,
		c.Name, c.Resources.Requests.Cpu().String(), request)
	s.run(t, "kubectl", "patch", "pod", pod, "-n", operatorNamespace, "--subresource", "resize", "-p", patch)
	waitFor(t, time.Minute, pod+"'s memory request resized to "+request, func(ctx context.Context) error {
		p, err := s.kube.CoreV1().Pods(operatorNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Resources != nil && cs.Resources.Requests.Memory().String() == request {
				return nil
			}
		}
		return fmt.Errorf("not yet applied: %v", p.Status.ContainerStatuses[0].Resources)
	})
}

// startHog runs the Pod that makes the node short of memory: it holds hogMiB
// within its request (so it is not over it), at a priority below every
// other Pod's. Both go when the test ends.
func (s *suite) startHog(t *testing.T) {
	t.Cleanup(func() {
		_, _ = s.try("kubectl", "delete", "pod", "hog", "-n", targetNamespace, "--grace-period=0", "--ignore-not-found")
		_, _ = s.try("kubectl", "delete", "priorityclass", hogPriorityClass, "--ignore-not-found")
	})
	s.apply(t, fmt.Sprintf(`
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: %[5]s}
value: -1000
description: the real-node suite's memory hog, evicted after Pods over their requests and before any other
---
apiVersion: v1
kind: Pod
metadata: {name: hog, namespace: %[1]s}
spec:
  restartPolicy: Never
  priorityClassName: %[5]s
  containers:
  - name: hog
    image: ghcr.io/proxyfleet/echo:%[2]s
    imagePullPolicy: Never
    # Allocating only after a while: the kubelet ranks a Pod it has no
    # stats for yet first, and its stats take some seconds to appear.
    args: ["--hold-mib=%[3]d", "--hold-after=20s"]
    # No CPU limit: touching the memory takes CPU. The memory limit keeps
    # the hog within its request.
    resources:
      requests: {cpu: 10m, memory: %[4]dMi}
      limits: {memory: %[4]dMi}
`, targetNamespace, s.version, hogMiB, hogMiB+hogHeadroomMiB, hogPriorityClass))
}

// nodeMemoryAvailable is the kubelet's own figure for the node's available
// memory (the signal it evicts on), from its summary API.
func (s *suite) nodeMemoryAvailable(t *testing.T) uint64 {
	t.Helper()
	raw, err := s.kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", nodeName, "proxy", "stats", "summary").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the kubelet's summary: %v", err)
	}
	var summary struct {
		Node struct {
			Memory struct {
				AvailableBytes *uint64 `json:"availableBytes"`
			} `json:"memory"`
		} `json:"node"`
	}
	if err := json.Unmarshal(raw, &summary); err != nil || summary.Node.Memory.AvailableBytes == nil {
		t.Fatalf("the kubelet's summary has no node memory.availableBytes (%v): %.300s", err, raw)
	}
	return *summary.Node.Memory.AvailableBytes
}

// setKubeletEviction restarts the kubelet with a drop-in giving evictionHard
// (and a short pressure transition period, so the Node's condition clears
// soon after the pressure); the test's end removes it and restarts the
// kubelet again, whatever happened.
func (s *suite) setKubeletEviction(t *testing.T, evictionHard string) {
	dropIn := filepath.Join(s.root, ".cluster", "kubelet", "config.d", "90-memory-pressure.conf")
	restart := func() error {
		_, err := s.try("cluster", "--dir", filepath.Join(s.root, ".cluster"), "--bin", filepath.Join(s.root, "bin"), "restart", "kubelet")
		return err
	}
	t.Cleanup(func() {
		if err := os.Remove(dropIn); err != nil && !os.IsNotExist(err) {
			t.Errorf("removing the kubelet drop-in: %v", err)
		}
		if err := restart(); err != nil {
			t.Errorf("restarting the kubelet without the drop-in: %v", err)
		}
	})
	content := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard: {%s}
evictionPressureTransitionPeriod: 10s
`, evictionHard)
	if err := os.WriteFile(dropIn, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := restart(); err != nil {
		t.Fatalf("restarting the kubelet with %s: %v", dropIn, err)
	}
}
