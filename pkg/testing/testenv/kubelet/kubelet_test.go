package kubelet_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv/kubelet"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

const (
	runLabel    = "kubelet-test/run"
	proxyPort   = 3128
	waitTimeout = 20 * time.Second
)

// setup starts a kubelet for the Pods labelled runLabel=yes in a new namespace.
func setup(t *testing.T) (context.Context, kubernetes.Interface, string, *kubelet.Kubelet) {
	env := apiServer.Get(t)
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := kubernetes.NewForConfigOrDie(env.Config)
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := kubelet.Start(ctx, t, client, kubelet.Options{Namespace: ns.Name, LabelSelector: runLabel + "=yes"})
	return ctx, client, ns.Name, k
}

type podOption func(*corev1.Pod)

// proxyPod builds a Pod the way the kubernetes provider shapes its own:
// forward-proxy args, a named port, a readiness probe on it.
func proxyPod(name string, opts ...podOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: "yes"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name:  "proxy",
				Image: "forward-proxy:test",
				Args:  []string{fmt.Sprintf("--listen=:%d", proxyPort), "--name=" + name},
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: proxyPort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("proxy"),
				}}},
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withAuthFrom(secret string) podOption {
	return func(p *corev1.Pod) {
		ref := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
			}}
		}
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "PROXY_USERNAME", ValueFrom: ref("username")},
			{Name: "PROXY_PASSWORD", ValueFrom: ref("password")},
		}
	}
}

func withCloudInitFrom(secret string) podOption {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Args = append(c.Args, "--cloud-init=/etc/ci/user-data")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "ci", MountPath: "/etc/ci", ReadOnly: true}}
		p.Spec.Volumes = []corev1.Volume{{Name: "ci", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}
	}
}

func withLabel(k, v string) podOption {
	return func(p *corev1.Pod) { p.Labels[k] = v }
}

func createPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func createSecret(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// until polls cond until it holds; the last message explains a failure.
func until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.Check(t, waitTimeout, 20*time.Millisecond, what, eventually.Holds(cond))
}

func waitForPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	until(t, name+" "+what, func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return cond(p), fmt.Sprintf("phase %q, podIP %q, conditions %+v, containers %+v", p.Status.Phase, p.Status.PodIP, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return pod
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return p.Status.Phase == corev1.PodRunning && c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitingReason(reason string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil && cs.State.Waiting.Reason == reason {
				return true
			}
		}
		return false
	}
}

func fetchStatus(t *testing.T, proxy *url.URL, target string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := proxytest.Fetch(ctx, proxy, target, nil)
	if err != nil {
		t.Fatalf("fetching %s through %s: %v", target, proxy.Host, err)
	}
	return res.Status
}

// TestRunsPodOnLoopbackWithAuth: the API server takes a loopback podIP, the
// Pod is bound, Ready, and serves as a proxy with the credentials of its
// Secret.
func TestRunsPodOnLoopbackWithAuth(t *testing.T) {
	t.Parallel()
	ctx, client, ns, k := setup(t)
	createSecret(ctx, t, client, ns, "auth", map[string]string{"username": "crawler", "password": "s3cret"})
	created := createPod(ctx, t, client, ns, proxyPod("p1", withAuthFrom("auth")))

	pod := waitForPod(ctx, t, client, ns, "p1", "ready", ready)
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !ip.IsLoopback() || ip == netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("podIP %q: want 127.0.0.x with x ≥ 2", pod.Status.PodIP)
	}
	if diff := cmp.Diff([]corev1.PodIP{{IP: pod.Status.PodIP}}, pod.Status.PodIPs); diff != "" {
		t.Errorf("podIPs (-want +got):\n%s", diff)
	}
	if pod.Spec.NodeName != kubelet.DefaultNodeName {
		t.Errorf("nodeName %q, want %q", pod.Spec.NodeName, kubelet.DefaultNodeName)
	}
	running, ok := k.Pod(ns, "p1")
	if want := net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(proxyPort)); !ok || running.Addr != want || running.UID != created.UID {
		t.Fatalf("kubelet runs %+v (%v), want %s for UID %s", running, ok, want, created.UID)
	}

	target := proxytest.StartHTTPTarget(t)
	proxy := &url.URL{Scheme: "http", Host: running.Addr}
	if got := fetchStatus(t, proxy, target.URL+"/generate_204"); got != http.StatusProxyAuthRequired {
		t.Errorf("without credentials: status %d, want 407", got)
	}
	proxy.User = url.UserPassword("crawler", "s3cret")
	if got := fetchStatus(t, proxy, target.URL+"/generate_204"); got != http.StatusNoContent {
		t.Errorf("with the Secret's credentials: status %d, want 204", got)
	}
}

// TestDeletionStopsProxyAndFinishesDeletion: a bound Pod is deleted
// gracefully (deletionTimestamp); the kubelet stops the proxy and removes
// the Pod.
func TestDeletionStopsProxyAndFinishesDeletion(t *testing.T) {
	t.Parallel()
	ctx, client, ns, k := setup(t)
	createPod(ctx, t, client, ns, proxyPod("p1"))
	waitForPod(ctx, t, client, ns, "p1", "ready", ready)

	if err := client.CoreV1().Pods(ns).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "Pod gone", func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	// The proxy stops before the Pod goes. (Dialling its address would not
	// tell: a parallel test may listen there by now.)
	if pods := k.Pods(); len(pods) != 0 {
		t.Errorf("still running: %+v", pods)
	}
}

// TestWaitsForSecrets: a missing credentials Secret is
// CreateContainerConfigError, a missing volume Secret ContainerCreating,
// and each heals once the Secret exists; the mounted file is what the Pod
// sees.
func TestWaitsForSecrets(t *testing.T) {
	t.Parallel()
	ctx, client, ns, k := setup(t)
	createPod(ctx, t, client, ns, proxyPod("p1", withAuthFrom("auth"), withCloudInitFrom("ci")))

	waitForPod(ctx, t, client, ns, "p1", "CreateContainerConfigError", waitingReason("CreateContainerConfigError"))
	createSecret(ctx, t, client, ns, "auth", map[string]string{"username": "u", "password": "p"})
	waitForPod(ctx, t, client, ns, "p1", "ContainerCreating", waitingReason("ContainerCreating"))
	createSecret(ctx, t, client, ns, "ci", map[string]string{"user-data": "#cloud-config\n"})
	waitForPod(ctx, t, client, ns, "p1", "ready", ready)

	running, _ := k.Pod(ns, "p1")
	if diff := cmp.Diff(map[string][]byte{"/etc/ci/user-data": []byte("#cloud-config\n")}, running.Files); diff != "" {
		t.Errorf("mounted files (-want +got):\n%s", diff)
	}
}

// TestDistinctAddressesAndSelector: every Pod gets its own IP; Pods outside
// the selector are left alone.
func TestDistinctAddressesAndSelector(t *testing.T) {
	t.Parallel()
	ctx, client, ns, k := setup(t)
	for _, name := range []string{"a", "b", "c"} {
		createPod(ctx, t, client, ns, proxyPod(name))
	}
	createPod(ctx, t, client, ns, proxyPod("other", withLabel(runLabel, "no")))

	ips := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		pod := waitForPod(ctx, t, client, ns, name, "ready", ready)
		if prev, dup := ips[pod.Status.PodIP]; dup {
			t.Errorf("%s and %s share podIP %s", prev, name, pod.Status.PodIP)
		}
		ips[pod.Status.PodIP] = name
	}
	other, err := client.CoreV1().Pods(ns).Get(ctx, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Spec.NodeName != "" || other.Status.Phase != corev1.PodPending {
		t.Errorf("unselected Pod touched: node %q, phase %q", other.Spec.NodeName, other.Status.Phase)
	}
	if n := len(k.Pods()); n != 3 {
		t.Errorf("%d Pods running, want 3", n)
	}
}

// TestBadArgsCrashLoop: flags cmd/forward-proxy would reject keep the Pod
// from running, as the binary would exit.
func TestBadArgsCrashLoop(t *testing.T) {
	t.Parallel()
	tests := map[string][]string{
		"unknown flag":           {"--listen=:3128", "--no-such-flag"},
		"port 0":                 {"--listen=:0"},
		"cloud-init not mounted": {"--listen=:3128", "--cloud-init=/nowhere"},
		"positional argument":    {"--listen=:3128", "extra"},
		"name with a space":      {"--listen=:3128", "--name=a b"},
	}
	ctx, client, ns, k := setup(t)
	i := 0
	for name, args := range tests {
		podName := fmt.Sprintf("bad-%d", i)
		i++
		t.Run(name, func(t *testing.T) {
			createPod(ctx, t, client, ns, proxyPod(podName, func(p *corev1.Pod) { p.Spec.Containers[0].Args = args }))
			waitForPod(ctx, t, client, ns, podName, "CrashLoopBackOff", waitingReason("CrashLoopBackOff"))
			if _, ok := k.Pod(ns, podName); ok {
				t.Error("the kubelet runs it anyway")
			}
		})
	}
}
