//go:build realnode

package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// proxyServesACrawler: a kubernetes-provider Proxy in a namespace that
// enforces PodSecurity restricted becomes a forward-proxy container the kubelet
// started, is probed Ready through itself, is leased through the leases
// Service (its ClusterIP, through kube-proxy), and curl through it reaches a
// target Pod, which sees the proxy Pod's address.
func proxyServesACrawler(t *testing.T, s *suite) {
	s.startEcho(t)
	s.crawlNamespace(t)
	s.apply(t, fmt.Sprintf(`
apiVersion: crawl.proxyfleet.io/v1alpha1
kind: Proxy
metadata: {name: edge, namespace: %[1]s}
spec:
  mode: Managed
  provider: kubernetes
  maxLeases: 1
  kubernetes:
    port: 3128
    allowFrom: {namespaces: [%[1]s]}
  egress:
    allowCIDRs: [10.244.0.0/16]   # the target Pod; private ranges are refused by default
  healthCheck:
    url: http://%[2]s/
    expectedStatus: 200
`, crawlNamespace, net.JoinHostPort(s.echoIP, "8080")))

	began := time.Now()
	var proxy *crawlv1alpha1.Proxy
	waitFor(t, 2*time.Minute, "Proxy edge Ready", func(ctx context.Context) error {
		p, err := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace).Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != crawlv1alpha1.PhaseReady {
			return fmt.Errorf("phase %q, conditions %+v", p.Status.Phase, p.Status.Conditions)
		}
		proxy = p
		return nil
	})
	t.Logf("Proxy create → Ready with a real Pod: %s", time.Since(began).Round(100*time.Millisecond))
	s.report.add("Proxy create → Ready with a real Pod", time.Since(began))

	pod := s.proxyPod(t, proxy.Status.IP)
	if st := pod.Status.ContainerStatuses; len(st) != 1 || st[0].State.Running == nil || !strings.HasPrefix(st[0].ContainerID, "containerd://") {
		t.Fatalf("proxy Pod %s: container statuses %+v, want one running under containerd", pod.Name, st)
	}
	// containerd's record of the container: run by the runc shim.
	info := s.run(t, "ctr", "--address", filepath.Join(s.root, ".cluster", "containerd", "containerd.sock"), "-n", "k8s.io",
		"containers", "info", strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://"))
	if !strings.Contains(info, `"io.containerd.runc.v2"`) {
		t.Errorf("the proxy container's runtime is not runc's shim:\n%s", info)
	}
	policies, err := s.kube.NetworkingV1().NetworkPolicies(crawlNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(policies.Items) != 1 || len(policies.Items[0].Spec.PolicyTypes) != 2 {
		t.Errorf("%d NetworkPolicies in %s, want edge's, with egress and the ingress of spec.kubernetes.allowFrom: %+v", len(policies.Items), crawlNamespace, policies.Items)
	}

	s.token = strings.TrimSpace(s.run(t, "kubectl", "create", "token", "crawler", "-n", crawlNamespace, "--duration=1h"))
	lease := s.acquire(t, "e2e-crawler")
	s.leaseID, s.lease = lease.ID, lease
	s.report.add("helm install → first 201 lease (the Proxy created after the install)", time.Since(s.installedAt))
	if lease.Proxy.Name != "edge" || lease.Credentials == nil {
		t.Fatalf("lease %+v: want proxy edge with credentials", lease)
	}
	proxyURL, err := url.Parse(lease.Proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := curl("-x", proxyURL.String(), "--proxy-user", lease.Credentials.Username+":"+lease.Credentials.Password,
		"http://"+net.JoinHostPort(s.echoIP, "8080")+"/")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(body); got != pod.Status.PodIP {
		t.Errorf("the target saw %q, want the proxy Pod's address %s", got, pod.Status.PodIP)
	}
	// maxLeases 1: a second crawler finds nothing free.
	if code, body := s.leaseAnswer(t, "POST", "/v1/leases", `{"holder":"second","namespace":"crawl"}`); code != 503 {
		t.Errorf("second acquire: %d %s, want 503 NoneFree", code, body)
	}
}

// crawlNamespace makes the crawlers' namespace (PodSecurity restricted), their
// ServiceAccount and its binding to the documented crawler role.
func (s *suite) crawlNamespace(t *testing.T) {
	s.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels:
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: crawler, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: crawler, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-operator-crawler}
subjects: [{kind: ServiceAccount, name: crawler, namespace: %[1]s}]
`, crawlNamespace))
}

// startEcho runs the target Pod behind the Service echo.target and records
// their addresses.
func (s *suite) startEcho(t *testing.T) {
	s.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: %[1]s}
spec:
  selector: {app: echo}
  ports: [{port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo, namespace: %[1]s, labels: {app: echo}}
spec:
  containers:
  - name: echo
    image: ghcr.io/proxyfleet/echo:%[2]s
    imagePullPolicy: Never
    ports: [{containerPort: 8080}]
    # Within its request, so that memory pressure evicts others first.
    resources: {requests: {cpu: 10m, memory: 16Mi}}
`, targetNamespace, s.version))
	waitFor(t, time.Minute, "echo Pod Running", func(ctx context.Context) error {
		p, err := s.kube.CoreV1().Pods(targetNamespace).Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !podReady(*p) || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		s.echoIP = p.Status.PodIP
		return nil
	})
	svc, err := s.kube.CoreV1().Services(targetNamespace).Get(context.Background(), "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.echoServiceIP = svc.Spec.ClusterIP
}

func (s *suite) proxyPod(t *testing.T, ip string) corev1.Pod {
	t.Helper()
	pods, err := s.kube.CoreV1().Pods(crawlNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == ip {
			return p
		}
	}
	t.Fatalf("no Pod in %s has the Proxy's address %s", crawlNamespace, ip)
	return corev1.Pod{}
}

type lease struct {
	ID    string `json:"id"`
	Proxy struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"proxy"`
	Credentials *struct {
		Username string `json:"username"`
		Password string `json:"password"`
	} `json:"credentials"`
}

// acquire leases a proxy of the crawl namespace through the leases Service.
func (s *suite) acquire(t *testing.T, holder string) lease {
	t.Helper()
	var l lease
	waitFor(t, time.Minute, "a 201 lease", func(context.Context) error {
		code, body := s.leaseCall(t, "POST", "/v1/leases", fmt.Sprintf(`{"holder":%q,"namespace":%q,"ttl":"5m"}`, holder, crawlNamespace))
		if code != 201 {
			return fmt.Errorf("%d %s", code, body)
		}
		return json.Unmarshal([]byte(body), &l)
	})
	return l
}

// leaseAnswer is leaseCall retried over transport errors, for up to a
// minute: the first HTTP answer. Right after a change of Pods the Service may
// send a call to one on its way in or out.
func (s *suite) leaseAnswer(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var code int
	var answer string
	waitFor(t, time.Minute, "an answer from the leases Service", func(context.Context) error {
		if code, answer = s.leaseCall(t, method, path, body); code == 0 {
			return errors.New(answer)
		}
		return nil
	})
	return code, answer
}

// leaseCall sends one lease API call to the leases Service's ClusterIP with
// the crawler's token and returns the status and body.
func (s *suite) leaseCall(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	svc, err := s.kube.CoreV1().Services(operatorNamespace).Get(context.Background(), "proxy-operator-leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-sS", "-m", "10", "-o", "-", "-w", "\n%{http_code}", "-X", method,
		"-H", "Authorization: Bearer " + s.token, "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8080") + path}
	if body != "" {
		args = append(args, "-d", body)
	}
	out, err := curlRaw(args...)
	if err != nil {
		return 0, err.Error()
	}
	i := strings.LastIndexByte(out, '\n')
	var code int
	if _, err := fmt.Sscan(out[i+1:], &code); err != nil {
		return 0, out
	}
	return code, out[:i]
}
