package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv/kubelet"
)

// Names of the flows' objects, in a run's Proxy namespace.
const (
	credentialsSecret    = "proxy-credentials"
	cloudInitSecret      = "proxy-cloud-init"
	retryCloudInitSecret = "retry-cloud-init"
	// bestEffortQuota refuses BestEffort Pods ("status unknown for quota")
	// until the test deletes it; the retry flow's Pod is the only BestEffort one.
	bestEffortQuota = "best-effort-pods"

	externalProxy = "ext"
	managedProxy  = "pod"
	retryProxy    = "retry"
	// vanishedProxy is the Proxy the orphan Pod claims to serve; it never existed.
	vanishedProxy = "vanished"
)

// secretValues are the Secret contents of every run: distinctive strings
// that must never show up in a log line, an event or a status.
var secretValues = newSecretValues()

type secretsOfRuns struct {
	username, password string
	// cloudInitMarker is in the managed proxy's cloud-init.
	cloudInitMarker string
	// retryMarkers are the successive cloud-init contents of the retry
	// flow's Secret: the first, one per edit, and the last.
	retryMarkers []string
}

// editsInARow is how many edits the External and retry flows make, each
// waiting for the last to show, within editBound each. An operator that
// watches shows each within a second; one that only relists (it may not
// watch) shows edit k no sooner than client-go's relist backoff after
// relist k-1, at least 0.8 s × 2^(k-1): 6.4 s for the fourth, beyond the
// bound whatever the jitter.
const (
	editsInARow = 5
	editBound   = 5 * time.Second
)

func newSecretValues() secretsOfRuns {
	random := func(prefix string) string {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
	s := secretsOfRuns{
		username:        random("u-7f3c"),
		password:        random("p-91ab"),
		cloudInitMarker: random("ci-5e2d"),
	}
	for i := range editsInARow + 2 {
		s.retryMarkers = append(s.retryMarkers, random(fmt.Sprintf("ci-r%d-", i)))
	}
	return s
}

// all lists every secret value.
func (s secretsOfRuns) all() []string {
	return append([]string{s.username, s.password, s.cloudInitMarker}, s.retryMarkers...)
}

func cloudInitWith(marker string) string {
	return "#cloud-config\n# " + marker + "\nruncmd: [\"true\"]\n"
}

// suite is what the runs of one test share: admin clients, the test kubelet
// running every run's proxy Pods, a loopback health-check target, and two
// forward proxies for the External proxy to point at.
type suite struct {
	kube          kubernetes.Interface
	crawl         versioned.Interface
	kubelet       *kubelet.Kubelet
	artifacts     operatorArtifacts
	healthURL     string
	externalPorts [2]int32

	// startMu orders run starts: a run makes its orphan only once the run
	// started before it has had its one collection round (lastRound
	// closes), so that no run collects another's orphan.
	startMu   sync.Mutex
	lastRound <-chan struct{}
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	// Several runs poll at once: a client-side rate limit would make the
	// test, not the operator, the slow side. pollInterval bounds the load.
	cfg := rest.CopyConfig(shared.Get(t).Env.Config)
	cfg.QPS = -1 // no limiter
	s := &suite{
		kube:      kubernetes.NewForConfigOrDie(cfg),
		crawl:     versioned.NewForConfigOrDie(cfg),
		artifacts: loadArtifacts(t),
	}
	s.kubelet = kubelet.Start(t.Context(), t, s.kube, kubelet.Options{
		LabelSelector: crawlv1alpha1.TagManagedBy + "=" + crawlv1alpha1.ManagedByValue,
	})
	// Health checks stay on loopback.
	s.healthURL = proxytest.StartHTTPTarget(t).URL + "/generate_204"
	for i := range s.externalPorts {
		p := proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1})
		_, port, err := net.SplitHostPort(p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		s.externalPorts[i] = int32(n)
	}
	return s
}

// operatorRun is one installation of the operator (its namespace, its
// copy of the RBAC artifacts, its placeholder Pod), the namespace of the
// Proxies it reconciles, and the process.
type operatorRun struct {
	s         *suite
	name      string
	artifacts operatorArtifacts
	// ns is the operator's namespace; proxies is where its Proxies live.
	ns, proxies string
	podName     string
	orphan      string
	// crawlerToken is a token of a crawler's ServiceAccount in the Proxy
	// namespace, bound to the artifacts' crawler role there.
	crawlerToken string
	op           operatorProcess
}

// runOptions are a run's own flags and environment for the operator.
type runOptions struct {
	args []string
	env  []string
}

// startRun installs a (already renamed for its installation), prepares the
// flows' fixtures, and starts the operator on a token of a's ServiceAccount,
// leader-elected in a's namespace and reconciling one Proxy namespace.
func (s *suite) startRun(t *testing.T, name string, a operatorArtifacts, opts runOptions) *operatorRun {
	t.Helper()
	r := &operatorRun{
		s:         s,
		name:      name,
		artifacts: a,
		ns:        a.namespace.Name,
		proxies:   "crawl-" + name,
		podName:   "proxy-operator-0",
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.lastRound != nil {
		select {
		case <-s.lastRound:
		case <-t.Context().Done():
		}
	}
	a.apply(t, s.kube)
	if _, err := s.kube.CoreV1().Pods(r.ns).Create(t.Context(), a.placeholderPod(r.podName), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the placeholder Pod: %v", err)
	}
	r.createFixtures(t)
	t.Cleanup(func() { r.removeProxies() }) // after the process is killed (cleanups run last first)

	token, err := shared.Get(t).Env.ServiceAccountToken(t.Context(), a.serviceAccount.Namespace, a.serviceAccount.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := shared.Get(t).Env.WriteUserKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--namespace=" + r.proxies,
		"--leader-elect=true",
		"--leader-elect-namespace=" + r.ns,
		"--providers=kubernetes",
		"--pod-name=" + r.podName,
		"--pod-namespace=" + r.ns,
		// One collection round, right after the caches sync: it must find
		// the orphan this run made, and no later run's.
		"--gc-interval=1h",
	}, leaseTimings...)
	r.op = startOperator(t, name, kubeconfig, opts.env, append(args, opts.args...)...)
	s.lastRound = r.firstRoundDone()
	return r
}

// firstRoundDone closes once the run's collector has finished its round
// (its metric has a series), the process has exited, or a run that cannot
// collect (it never leads, its caches never sync) has had its chance.
func (r *operatorRun) firstRoundDone() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_ = eventually.Poll(ctx, pollInterval, func(ctx context.Context) error {
			if !r.op.Running() {
				return nil
			}
			_, err := r.op.metric(ctx, "proxy_operator_gc_collected_total", map[string]string{"provider": "kubernetes"})
			return err
		})
	}()
	return done
}

// createFixtures makes what the flows start from, before the operator runs:
// the Proxy namespace (Pod Security "restricted", as the Pods must pass it),
// the Secrets, the quota that refuses the retry flow's Pod, and an orphan.
func (r *operatorRun) createFixtures(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	kube := r.s.kube
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   r.proxies,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secrets := []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Name: credentialsSecret, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
			StringData: map[string]string{
				crawlv1alpha1.AuthUsernameKey: secretValues.username,
				crawlv1alpha1.AuthPasswordKey: secretValues.password,
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: cloudInitSecret},
			StringData: map[string]string{"user-data": cloudInitWith(secretValues.cloudInitMarker)},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: retryCloudInitSecret},
			StringData: map[string]string{"user-data": cloudInitWith(secretValues.retryMarkers[0])},
		},
	}
	for _, s := range secrets {
		if _, err := kube.CoreV1().Secrets(r.proxies).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A quota whose usage nobody computed (testenv runs no quota
	// controller): admission refuses every BestEffort Pod with "status
	// unknown for quota", a transient refusal the operator retries with
	// backoff. Other Pods are not in its scope.
	hard := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}
	quota, err := kube.CoreV1().ResourceQuotas(r.proxies).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: bestEffortQuota},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard, Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	quota.Status.Hard = hard
	if _, err := kube.CoreV1().ResourceQuotas(r.proxies).UpdateStatus(ctx, quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A crawler of this namespace, as crawler-role.yaml says to bind it.
	crawler := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crawler", Namespace: r.proxies},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.artifacts.crawlerRole.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "crawler", Namespace: r.proxies}},
	}
	if _, err := kube.RbacV1().RoleBindings(r.proxies).Create(ctx, crawler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token, err := shared.Get(t).Env.ServiceAccountToken(ctx, r.proxies, "crawler", 0)
	if err != nil {
		t.Fatal(err)
	}
	r.crawlerToken = token

	orphan := orphanPod(r.proxies)
	if _, err := kube.CoreV1().Pods(r.proxies).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.orphan = orphan.Name
}

// orphanPod is a proxy Pod as the kubernetes provider makes them, for a
// Proxy that no longer exists: what a crash between a Create and the
// status write of a Proxy deleted meanwhile leaves behind.
func orphanPod(namespace string) *corev1.Pod {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	uid := types.UID("00000000-0000-4000-8000-" + hex.EncodeToString(b))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "px-orphan",
			Namespace: namespace,
			Labels: map[string]string{
				crawlv1alpha1.TagManagedBy:      crawlv1alpha1.ManagedByValue,
				crawlv1alpha1.TagProxyUID:       string(uid),
				crawlv1alpha1.TagProxyNamespace: namespace,
				crawlv1alpha1.TagProxyName:      vanishedProxy,
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "proxy",
				Image: "forward-proxy:test",
				Args:  []string{"--listen=:3128", "--name=px-orphan"},
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 3128}},
				// Not BestEffort: the quota of the retry flow is not about it.
				Resources: podprovider.DefaultResources(),
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}

// removeProxies clears the run's Proxy namespace once its operator is gone,
// so that the kubelet stops its proxies: Pods first (no later run's
// collector may take them for orphans), then the Proxies, finalizers and all.
func (r *operatorRun) removeProxies() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kube, crawl := r.s.kube, r.s.crawl
	_ = kube.CoreV1().Pods(r.proxies).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	list, err := crawl.CrawlV1alpha1().Proxies(r.proxies).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range list.Items {
		if len(p.Finalizers) > 0 {
			p.Finalizers = nil
			_, _ = crawl.CrawlV1alpha1().Proxies(r.proxies).Update(ctx, &p, metav1.UpdateOptions{})
		}
		err := crawl.CrawlV1alpha1().Proxies(r.proxies).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return
		}
	}
}

// proxySpec builders: every Proxy health-checks the loopback target.

func (r *operatorRun) externalProxy(port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: externalProxy, Namespace: r.proxies},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:        crawlv1alpha1.ModeExternal,
			Endpoint:    &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: port},
			HealthCheck: r.healthCheck(),
		},
	}
}

func (r *operatorRun) managedProxy(name, cloudInit string, opts ...func(*crawlv1alpha1.Proxy)) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.proxies},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:        crawlv1alpha1.ModeManaged,
			Provider:    crawlv1alpha1.ProviderKubernetes,
			Kubernetes:  &crawlv1alpha1.KubernetesProvider{Image: "forward-proxy:test"},
			CloudInit:   &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: cloudInit, Key: "user-data"}},
			HealthCheck: r.healthCheck(),
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// healthCheck probes the loopback target every 2 s, so that verdicts come
// within a test's patience.
func (r *operatorRun) healthCheck() crawlv1alpha1.HealthCheck {
	return crawlv1alpha1.HealthCheck{
		URL:            r.s.healthURL,
		ExpectedStatus: 204,
		Interval:       &metav1.Duration{Duration: 2 * time.Second},
		Timeout:        &metav1.Duration{Duration: time.Second},
	}
}

// withAuth gives the proxy credentials, and the label the lease flow
// selects it by.
func withAuth(secret string) func(*crawlv1alpha1.Proxy) {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
		p.Labels = map[string]string{authLabel: "yes"}
	}
}

// authLabel marks the proxy with credentials.
const authLabel = "e2e.proxyfleet.io/auth"

// allowFromCrawlers asks for a NetworkPolicy admitting the operator and one
// crawler namespace (the test kubelet does not enforce it: the flows check
// it is made and deleted with the Pod, on the artifacts' RBAC).
func allowFromCrawlers(p *crawlv1alpha1.Proxy) {
	p.Spec.Kubernetes.AllowFrom = &crawlv1alpha1.KubernetesAllowFrom{Namespaces: []string{"crawlers"}}
}

// bestEffort gives the Pod no requests or limits, which puts it in the
// scope of the BestEffort quota.
func bestEffort(p *crawlv1alpha1.Proxy) {
	p.Spec.Kubernetes.Resources = &corev1.ResourceRequirements{}
}
