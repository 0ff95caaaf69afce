//go:build realnode

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const (
	operatorNamespace = "proxy-operator"
	release           = "proxy-operator"
	operatorSelector  = "app.kubernetes.io/name=proxy-operator,app.kubernetes.io/component=operator"
	gatewaySelector   = "app.kubernetes.io/name=proxy-operator,app.kubernetes.io/component=gateway"
	leaderLabel       = "crawl.proxyfleet.io/leader"
	crawlNamespace    = "crawl"  // PodSecurity restricted: the proxies and the crawler
	targetNamespace   = "target" // the echo server the crawler reaches through a proxy
	// replicas is the chart's default replicaCount: the lease store's Raft
	// group of three, which keeps deciding with two.
	replicas = 3
	quorum   = replicas/2 + 1
)

// suite is what every step shares: the cluster's clients and what earlier
// steps left for later ones.
type suite struct {
	root, kubeconfig, version string
	kube                      kubernetes.Interface
	crawl                     versioned.Interface

	report      report
	installedAt time.Time // helm install began: the first lease is timed from it

	echoIP        string // the target Pod's address
	echoServiceIP string // its Service's, echo.target
	leaseID       string // a lease granted before the leader changes
	lease         lease  // that lease, with its proxy and credentials
	token         string // the crawler ServiceAccount's token

	crawlRows []policyRow // the crawler Pods' paths, for the NetworkPolicy table
}

func newSuite(t *testing.T) *suite {
	s := &suite{root: testenv.RepoRoot(t)}
	s.kubeconfig = filepath.Join(s.root, ".cluster", "kubeconfig")
	if _, err := os.Stat(s.kubeconfig); err != nil {
		t.Fatalf("no cluster: %v (make cluster starts one; make e2e starts it, runs this suite and stops it)", err)
	}
	for _, b := range []string{"kubectl", "helm", "ctr", "cluster"} {
		if _, err := os.Stat(filepath.Join(s.root, "bin", b)); err != nil {
			t.Fatalf("bin/%s: %v (make cluster-tools builds it)", b, err)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: make deps installs it")
	}
	version, err := os.ReadFile(filepath.Join(s.root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	s.version = strings.TrimSpace(string(version))
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	s.kube = kubernetes.NewForConfigOrDie(cfg)
	s.crawl = versioned.NewForConfigOrDie(cfg)
	return s
}

// run runs one of bin/'s tools against the cluster and fails the test on error.
func (s *suite) run(t *testing.T, tool string, args ...string) string {
	t.Helper()
	out, err := s.try(tool, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return out
}

func (s *suite) try(tool string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.root, "bin", tool), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// apply feeds manifest to kubectl apply.
func (s *suite) apply(t *testing.T, manifest string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.root, "bin", "kubectl"), "apply", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// curl runs the real curl; its body is returned, and an HTTP status outside
// 2xx is an error that carries the body.
func curl(args ...string) (string, error) {
	return curlRaw(append([]string{"-sS", "--fail-with-body", "-m", "10"}, args...)...)
}

func curlRaw(args ...string) (string, error) {
	out, err := exec.Command("curl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("curl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// waitFor polls check until it holds or timeout, a bound on a hang.
func waitFor(t *testing.T, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := eventually.Poll(ctx, 500*time.Millisecond, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// operatorPods returns the operator's Pods, their Ready ones, and the leader.
func (s *suite) operatorPods(ctx context.Context) (all []corev1.Pod, ready int, leader string, err error) {
	pods, err := s.kube.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: operatorSelector})
	if err != nil {
		return nil, 0, "", err
	}
	leaders := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		all = append(all, p)
		if podReady(p) {
			ready++
		}
		if p.Labels[leaderLabel] == "true" {
			leaders++
			leader = p.Name
		}
	}
	if leaders > 1 {
		return all, ready, "", fmt.Errorf("%d Pods carry %s=true", leaders, leaderLabel)
	}
	return all, ready, leader, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestRealNode runs the steps in order; each builds on the ones before, so the
// first failure ends the run.
func TestRealNode(t *testing.T) {
	s := newSuite(t)
	s.clean(t)
	if os.Getenv("REALNODE_REPORT") != "" {
		s.nodeIdle(t, 10*time.Second)
	}
	t.Cleanup(func() {
		s.report.write(t)
		if t.Failed() {
			s.dumpState(t)
		}
		s.clean(t)
	})
	steps := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"chart installs: three Ready replicas, one leader of the lease store and the controllers, metrics", installChart},
		{"crawler Pods crawl through the gateway and through a lease, by Service names", crawlerPodsCrawl},
		{"every NetworkPolicy holds for real packets: denied paths denied, allowed ones allowed", policiesHoldPackets},
		{"a kubernetes-provider Proxy under PodSecurity restricted serves a crawler", proxyServesACrawler},
		{"a ProxyPool rotates its Secret with Ready never below 2, then scales 3 → 0 → 2", poolRotates},
		{"the gateway keeps a session on one upstream", gatewayKeepsASession},
		{"the kubelet, containerd, etcd and the API server restart under running proxies", nodeAgentsRestart},
		{"another replica leads when the leader's Pod is deleted or its container killed; grants resume at once", leaderFailover},
		{"a leader cut off from the API server stops; another replica leads; nothing granted twice", leaderPartitioned},
		{"an operator Pod over its memory request is evicted under memory pressure; a leader renews", operatorEvicted},
		{"helm upgrade under crawler load rolls the Pods one at a time: no Recovering answer, no tunnel cut, the lease lives on", upgradeRolls},
		{"uninstall leaves no proxy Pods, Secrets or NetworkPolicies", uninstallLeavesNothing},
		{"kubectl apply -k installs the same operator", kustomizeInstalls},
	}
	for _, step := range steps {
		if !t.Run(step.name, func(t *testing.T) { step.run(t, s) }) {
			return
		}
	}
}

// clean removes what a previous run may have left: the release and the test
// namespaces (Proxies first, while the operator can still run finalizers).
func (s *suite) clean(t *testing.T) {
	_, _ = s.try("kubectl", "delete", "proxypools,proxies", "--all", "-n", crawlNamespace, "--timeout=60s", "--ignore-not-found")
	_, _ = s.try("kubectl", "delete", "proxies", "--all", "-n", loadNamespace, "--timeout=60s", "--ignore-not-found")
	_, _ = s.try("helm", "uninstall", release, "-n", operatorNamespace, "--wait", "--timeout=60s", "--ignore-not-found")
	_, _ = s.try("kubectl", "delete", "namespace", crawlNamespace, loadNamespace, targetNamespace, operatorNamespace, "--timeout=90s", "--ignore-not-found")
}

// dumpState logs what explains a failure: Pods, events, the operator's and
// the gateways' logs.
func (s *suite) dumpState(t *testing.T) {
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "proxies,proxypools,secrets,networkpolicies", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"logs", "-n", operatorNamespace, "-l", operatorSelector, "--tail=60", "--prefix"},
		{"logs", "-n", operatorNamespace, "-l", gatewaySelector, "--tail=30", "--prefix"},
	} {
		out, _ := s.try("kubectl", args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}

// raftLeader is the operator Pod whose replica leads the lease store's Raft
// group (proxy_operator_lease_store_raft_leader 1 on its metrics port), and
// how many voters it counts.
func (s *suite) raftLeader(ctx context.Context) (corev1.Pod, int, error) {
	pods, _, _, err := s.operatorPods(ctx)
	if err != nil {
		return corev1.Pod{}, 0, err
	}
	var leaders []corev1.Pod
	voters := 0
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		metrics, err := curl("http://" + net.JoinHostPort(p.Status.PodIP, "9090") + "/metrics")
		if err != nil {
			continue // not serving yet, or going
		}
		if metricValue(metrics, "proxy_operator_lease_store_raft_leader") == 1 {
			leaders = append(leaders, p)
			voters = int(metricValue(metrics, `proxy_operator_lease_store_raft_members{suffrage="voter"}`))
		}
	}
	if len(leaders) != 1 {
		return corev1.Pod{}, 0, fmt.Errorf("%d replicas lead the lease store", len(leaders))
	}
	return leaders[0], voters, nil
}

// metricValue is the value of the series named exactly so (with its labels)
// in a /metrics page, -1 when absent.
func metricValue(page, series string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}
