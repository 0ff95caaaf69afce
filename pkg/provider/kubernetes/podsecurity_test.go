package kubernetes_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// TestPodSecurityRestricted: the Pod the provider builds (with every
// option that touches it) is admitted by the API server's PodSecurity
// admission into a namespace enforcing "restricted", and copies of it that
// each break one rule of the profile are refused there, which also shows
// that the plugin runs in testenv's kube-apiserver.
func TestPodSecurityRestricted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ns := f.namespace(map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	f.secretIn(ns, "creds", map[string]string{"username": "u", "password": "p"})
	p := f.proxy(ns, podProxy("p1", withAuth("creds"), func(p *crawlv1alpha1.Proxy) {
		p.Spec.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 8080}
		p.Spec.Egress = &crawlv1alpha1.ProxyEgress{AllowCIDRs: []crawlv1alpha1.CIDR{"10.20.0.0/16"}}
	}))
	inst, err := f.prov.Create(f.ctx, createRequest(p, []byte("#cloud-config\n")))
	if err != nil {
		t.Fatalf("the provider's Pod was not admitted under restricted: %v", err)
	}
	_, name, _ := strings.Cut(inst.ID, "/")
	built, err := f.kube.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := built.Spec.Containers[0].SecurityContext
	if c == nil || !ptr.Deref(c.ReadOnlyRootFilesystem, false) {
		t.Errorf("the proxy container's root file system is not read-only: %+v", c)
	}

	tests := map[string]struct {
		breakIt   func(*corev1.Pod)
		violation string // "" = admitted
	}{
		"unchanged copy": {breakIt: func(*corev1.Pod) {}},
		"privilege escalation allowed": {
			breakIt:   func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
			violation: "allowPrivilegeEscalation != false",
		},
		"capabilities not dropped": {
			breakIt:   func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil },
			violation: "unrestricted capabilities",
		},
		"a capability added": {
			breakIt: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
			},
			violation: "unrestricted capabilities",
		},
		"root allowed": {
			breakIt: func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsNonRoot = nil
				p.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
			},
			violation: "runAsUser=0",
		},
		"no seccomp profile": {
			breakIt:   func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil },
			violation: "seccompProfile",
		},
		"privileged": {
			breakIt: func(p *corev1.Pod) {
				// Validation refuses privileged with allowPrivilegeEscalation false.
				p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
				p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
			},
			violation: "privileged",
		},
	}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-", Namespace: ns},
				Spec:       *built.Spec.DeepCopy(),
			}
			pod.Spec.NodeName = ""
			tc.breakIt(pod)
			_, err := f.kube.CoreV1().Pods(ns).Create(f.ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.violation == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.violation == "":
			case err == nil:
				t.Fatalf("admitted; want a PodSecurity refusal naming %q", tc.violation)
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) || !strings.Contains(err.Error(), tc.violation):
				t.Fatalf("got %v; want a PodSecurity refusal naming %q", err, tc.violation)
			}
		})
	}
	if err := f.prov.Delete(f.ctx, inst.ID); err != nil {
		t.Error(err)
	}
}

// secretIn creates a credentials Secret in ns, marked for proxies.
func (f *fixture) secretIn(ns, name string, data map[string]string) {
	f.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}}, StringData: data}
	if _, err := f.kube.CoreV1().Secrets(ns).Create(f.ctx, s, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}
