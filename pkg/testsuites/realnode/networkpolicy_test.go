//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// path is one way through the node's network, tried with real packets: a
// TCP connection to a port something listens on, so that only a policy
// (kube-router rejects) can stop it.
type path struct {
	what    string
	addr    string
	allowed bool // expected
}

// policyRow is a line of the NetworkPolicy table.
type policyRow struct {
	what              string
	expected, observe bool
}

// policiesHoldPackets: every NetworkPolicy the operator creates, tried with
// real packets on an enforcing network plugin (kube-router). A proxy Pod
// whose spec.egress admits only the target reaches the target and DNS, and
// nothing else: not the API server, the kubelet, the operator's metrics or a
// gateway Pod; one whose spec.egress admits the node reaches it. Into a
// proxy Pod with spec.kubernetes.allowFrom come the operator's and the
// gateway's Pods and the listed namespace's, not another's. The crawler
// Pods' crawls (the step before) add their paths. Printed as a table; every
// row must hold.
func policiesHoldPackets(t *testing.T, s *suite) {
	ctx := context.Background()
	node := s.nodeIP(t)
	s.createProxy(t, openedProxy, "{port: 3128}", s.echoIP+"/32", s.echoServiceIP+"/32", node+"/32")
	door, opened := s.waitProxyReady(t, doorProxy), s.waitProxyReady(t, openedProxy)
	doorPod, openedPod := s.proxyPod(t, door.Status.IP), s.proxyPod(t, opened.Status.IP)
	operator, gateway, dns := s.onePod(t, operatorNamespace, operatorSelector, true), s.onePod(t, operatorNamespace, gatewaySelector, false), s.onePod(t, "kube-system", "k8s-app=kube-dns", false)
	hostPort := func(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }
	api, kubelet := hostPort(node, 6443), hostPort(node, 10250)
	metrics, doorAddr, openedAddr := hostPort(operator.Status.PodIP, 9090), hostPort(door.Status.IP, 3128), hostPort(opened.Status.IP, 3128)
	gatewaySvc, leasesSvc := s.serviceAddr(t, "proxy-operator-gateway", 3128), s.serviceAddr(t, "proxy-operator-leases", 8080)
	kubernetesSvc := hostPort(s.serviceIP(t, "default", "kubernetes"), 443)

	rows := s.crawlRows
	rows = append(rows, s.probeIn(t, doorPod, "proxy Pod (spec.egress: the target)", []path{
		{"API server, node " + api, api, false},
		{"kubernetes Service " + kubernetesSvc, kubernetesSvc, false},
		{"kubelet, node " + kubelet, kubelet, false},
		{"operator's metrics " + metrics, metrics, false},
		{"a gateway Pod of proxy-operator " + hostPort(gateway.Status.PodIP, 3128), hostPort(gateway.Status.PodIP, 3128), false},
		{"CoreDNS Pod, TCP 53", hostPort(dns.Status.PodIP, 53), true},
		{"the target Pod of namespace target", hostPort(s.echoIP, 8080), true},
		{"the target's Service echo.target", hostPort(s.echoServiceIP, 8080), true},
	})...)
	rows = append(rows, s.probeIn(t, openedPod, "proxy Pod (spec.egress: the target and the node)", []path{
		{"API server, node " + api, api, true},
		{"kubelet, node " + kubelet, kubelet, true},
		{"operator's metrics " + metrics, metrics, false},
	})...)
	rows = append(rows, s.probeIn(t, operator, "operator Pod (leader)", []path{
		{"API server, node " + api, api, true},
		{"proxy Pod with allowFrom " + doorAddr, doorAddr, true},
	})...)
	rows = append(rows, s.probeIn(t, gateway, "gateway Pod", []path{
		{"leases Service " + leasesSvc, leasesSvc, true},
		{"proxy Pod with allowFrom " + doorAddr, doorAddr, true},
	})...)
	rows = append(rows, s.probeFrom(t, crawlNamespace, "Pod of namespace crawl (in allowFrom)", []path{
		{"proxy Pod with allowFrom " + doorAddr, doorAddr, true},
		{"gateway Service " + gatewaySvc, gatewaySvc, true},
		{"leases Service " + leasesSvc, leasesSvc, true},
	})...)
	rows = append(rows, s.probeFrom(t, targetNamespace, "Pod of namespace target (not in allowFrom)", []path{
		{"proxy Pod with allowFrom " + doorAddr, doorAddr, false},
		{"proxy Pod without allowFrom " + openedAddr, openedAddr, true},
	})...)
	t.Log("NetworkPolicy paths, tried with real packets:\n" + policyTable(rows))
	for _, r := range rows {
		if r.expected != r.observe {
			t.Errorf("%s: expected %s, observed %s", r.what, verdict(r.expected), verdict(r.observe))
		}
	}
	s.deleteProxies(ctx, t, doorProxy, openedProxy)
}

// probeIn runs netcheck as an ephemeral container in pod (its network, its
// policies) and returns the table rows of paths.
func (s *suite) probeIn(t *testing.T, pod corev1.Pod, from string, paths []path) []policyRow {
	t.Helper()
	ctx := context.Background()
	pods := s.kube.CoreV1().Pods(pod.Namespace)
	current, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("netcheck-%d", len(current.Spec.EphemeralContainers))
	current.Spec.EphemeralContainers = append(current.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, Image: "ghcr.io/proxyfleet/netcheck:" + s.version, ImagePullPolicy: corev1.PullNever,
			Args: netcheckArgs(paths), SecurityContext: restrictedContainer(),
		},
	})
	if _, err := pods.UpdateEphemeralContainers(ctx, pod.Name, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "netcheck in "+pod.Namespace+"/"+pod.Name+" done", func(ctx context.Context) error {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, st := range p.Status.EphemeralContainerStatuses {
			if st.Name == name && st.State.Terminated != nil {
				return nil
			}
		}
		return fmt.Errorf("%s not terminated yet", name)
	})
	out, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{Container: name}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rowsOf(t, from, paths, string(out))
}

// probeFrom runs netcheck as a new Pod of namespace. A policy admits a new
// Pod by its namespace or labels only once kube-router has learnt its
// address from the API server, which the kubelet reports after the
// container started (about half a second here): each address gets
// settleTime, and a denied one is denied for all of it.
func (s *suite) probeFrom(t *testing.T, namespace, from string, paths []path) []policyRow {
	t.Helper()
	out := s.runPod(t, namespace, "netcheck", "default", "netcheck", append([]string{"--settle=" + settleTime.String()}, netcheckArgs(paths)...))
	t.Logf("netcheck as a Pod of %s printed:\n%s", namespace, out)
	return rowsOf(t, from, paths, out)
}

// settleTime is how long a new Pod's probe tries each address (probeFrom).
const settleTime = 5 * time.Second

func netcheckArgs(paths []path) []string {
	args := []string{"--timeout=3s"}
	for _, p := range paths {
		args = append(args, p.addr)
	}
	return args
}

// rowsOf reads netcheck's lines ("<addr> connected" or "<addr> failed: ...").
func rowsOf(t *testing.T, from string, paths []path, out string) []policyRow {
	t.Helper()
	connected := map[string]bool{}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		addr, result, _ := strings.Cut(line, " ")
		seen[addr] = true
		connected[addr] = strings.HasPrefix(result, "connected") // or "connected after <d>" (--settle)
	}
	var rows []policyRow
	for _, p := range paths {
		if !seen[p.addr] {
			t.Fatalf("netcheck from %s printed nothing for %s:\n%s", from, p.addr, out)
		}
		rows = append(rows, policyRow{what: from + " → " + p.what, expected: p.allowed, observe: connected[p.addr]})
	}
	return rows
}

func policyTable(rows []policyRow) string {
	var b strings.Builder
	b.WriteString("| path | expected | observed |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.what, verdict(r.expected), verdict(r.observe))
	}
	return b.String()
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// onePod returns a Running Pod of namespace matching selector (the leader,
// with leader set).
func (s *suite) onePod(t *testing.T, namespace, selector string, leader bool) corev1.Pod {
	t.Helper()
	pods, err := s.kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && (!leader || p.Labels[leaderLabel] == "true") {
			return p
		}
	}
	t.Fatalf("no Running Pod %s in %s (leader %v)", selector, namespace, leader)
	return corev1.Pod{}
}

func (s *suite) nodeIP(t *testing.T) string {
	t.Helper()
	node, err := s.kube.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", nodeName)
	return ""
}

func (s *suite) serviceIP(t *testing.T, namespace, name string) string {
	t.Helper()
	svc, err := s.kube.CoreV1().Services(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

func (s *suite) serviceAddr(t *testing.T, name string, port int) string {
	return net.JoinHostPort(s.serviceIP(t, operatorNamespace, name), fmt.Sprint(port))
}

// deleteProxies deletes Proxies of the crawlers' namespace and waits until
// they and their Pods are gone, so later steps find only their own.
func (s *suite) deleteProxies(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	proxies := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace)
	for _, name := range names {
		if err := proxies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "Proxies "+strings.Join(names, ", ")+" and their Pods gone", func(ctx context.Context) error {
		for _, name := range names {
			if _, err := proxies.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Proxy %s: %v", name, err)
			}
		}
		pods, err := s.kube.CoreV1().Pods(crawlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d Pods left in %s", len(pods.Items), crawlNamespace)
		}
		return nil
	})
}
