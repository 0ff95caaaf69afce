//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Service names a crawler Pod is given, resolved by the node's CoreDNS.
const (
	gatewayURL  = "http://proxy-operator-gateway.proxy-operator:3128"
	leasesURL   = "http://proxy-operator-leases.proxy-operator:8080"
	targetURL   = "http://echo.target:8080/"
	tokenFile   = "/var/run/secrets/kubernetes.io/serviceaccount/token" // projected by the kubelet
	doorProxy   = "door"                                                // crawled through; its policy is tried below
	openedProxy = "opened"                                              // spec.egress admits the node
)

// crawlerPodsCrawl: in the crawlers' namespace (PodSecurity restricted,
// their own ServiceAccount bound to the documented crawler role), a Proxy
// whose spec.egress admits only the target, and two crawler Pods of
// examples/crawler's image with the projected token: one through the
// gateway Service, one through a lease from the leases Service, both by DNS
// name; the target, also by name, sees the proxy Pod's address. Times helm
// install → the first page fetched through the gateway.
func crawlerPodsCrawl(t *testing.T, s *suite) {
	s.startEcho(t)
	s.crawlNamespace(t)
	s.createProxy(t, doorProxy, fmt.Sprintf("{port: 3128, allowFrom: {namespaces: [%s]}}", crawlNamespace), s.echoIP+"/32", s.echoServiceIP+"/32")
	door := s.waitProxyReady(t, doorProxy)

	body := s.runCrawler(t, "crawler-gateway", "--gateway", gatewayURL)
	firstPage := time.Since(s.installedAt)
	t.Logf("helm install → first page through the gateway by DNS name, fetched by a crawler Pod: %s", firstPage.Round(100*time.Millisecond))
	s.report.add("helm install → first page fetched by a crawler Pod through the gateway by DNS name (Proxy and Pod created after the install)", firstPage)
	through := strings.Contains(body, "via gateway proxy-operator-gateway.proxy-operator:3128: 200 OK") && strings.Contains(body, fmt.Sprintf("body %q", door.Status.IP))
	if !through {
		t.Errorf("crawler through the gateway printed:\n%s\nwant 200 OK with the proxy Pod's address %s as the target saw it", body, door.Status.IP)
	}
	s.crawlRows = append(s.crawlRows, policyRow{"crawler Pod → gateway Service by DNS name → proxy Pod with allowFrom → target by DNS name: a page", true, through})

	// examples/crawler retries a refused connection to the leased proxy for
	// --admit-wait (5s): this Pod is new, and kube-router admits it by its
	// namespace only once it has learnt its address (it says how long).
	body = s.runCrawler(t, "crawler-lease", "--lease-api", leasesURL)
	t.Logf("crawler through a lease printed:\n%s", body)
	leased := strings.Contains(body, "via "+crawlNamespace+"/"+doorProxy+": 200 OK") && strings.Contains(body, fmt.Sprintf("body %q", door.Status.IP))
	if !leased {
		t.Errorf("crawler through a lease printed:\n%s\nwant 200 OK through %s with its address %s as the target saw it", body, doorProxy, door.Status.IP)
	}
	s.crawlRows = append(s.crawlRows, policyRow{"crawler Pod → leases Service by DNS name, then → proxy Pod with allowFrom → target by DNS name: a page", true, leased})
}

// createProxy creates a kubernetes-provider Proxy whose spec.egress admits
// allow and whose health check reaches the target through it.
func (s *suite) createProxy(t *testing.T, name, kubernetes string, allow ...string) {
	t.Helper()
	s.apply(t, fmt.Sprintf(`
apiVersion: crawl.proxyfleet.io/v1alpha1
kind: Proxy
metadata: {name: %s, namespace: %s}
spec:
  mode: Managed
  provider: kubernetes
  maxLeases: 2
  kubernetes: %s
  egress: {allowCIDRs: ["%s"]}
  healthCheck: {url: "%s", expectedStatus: 200, interval: 3s, timeout: 2s}
`, name, crawlNamespace, kubernetes, strings.Join(allow, `", "`), targetURL))
}

func (s *suite) waitProxyReady(t *testing.T, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	var proxy *crawlv1alpha1.Proxy
	waitFor(t, 2*time.Minute, "Proxy "+name+" Ready", func(ctx context.Context) error {
		p, err := s.crawl.CrawlV1alpha1().Proxies(crawlNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != crawlv1alpha1.PhaseReady {
			return fmt.Errorf("phase %q, conditions %+v", p.Status.Phase, p.Status.Conditions)
		}
		proxy = p
		return nil
	})
	return proxy
}

// runCrawler runs examples/crawler's image as a Pod of the crawlers'
// namespace and ServiceAccount, fetching the target once by its Service
// name, and returns its output once it has succeeded.
func (s *suite) runCrawler(t *testing.T, name string, via ...string) string {
	t.Helper()
	args := append(via, "--namespace", crawlNamespace, "--token-file", tokenFile, "--url", targetURL, "--rounds", "1", "--show-body")
	return s.runPod(t, crawlNamespace, name, "crawler", "crawler", args)
}

// runPod runs image's entrypoint with args to completion as a Pod that
// PodSecurity restricted admits, and returns its log; it fails the test
// (with the log) when the Pod fails. The Pod is deleted on return.
func (s *suite) runPod(t *testing.T, namespace, name, serviceAccount, image string, args []string) string {
	t.Helper()
	ctx := context.Background()
	pods := s.kube.CoreV1().Pods(namespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount,
			RestartPolicy:      corev1.RestartPolicyNever,
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: name, Image: "ghcr.io/proxyfleet/" + image + ":" + s.version, ImagePullPolicy: corev1.PullNever,
				Args: args, SecurityContext: restrictedContainer(),
			}},
		},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}) }()
	var phase corev1.PodPhase
	waitFor(t, 2*time.Minute, "Pod "+namespace+"/"+name+" done", func(ctx context.Context) error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if phase = p.Status.Phase; phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	out, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("Pod %s/%s %s:\n%s", namespace, name, phase, out)
	}
	return string(out)
}

// restrictedContainer is what PodSecurity restricted asks of a container.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		RunAsNonRoot:             ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func ptr[T any](v T) *T { return &v }
