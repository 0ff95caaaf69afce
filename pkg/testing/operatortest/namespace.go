package operatortest

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// StartOnNamespace runs the operator binary against env as its admin, on ns
// (its Proxies and its leader Lease), at -v=2, with extra flags after those.
func StartOnNamespace(t *testing.T, env *testenv.Environment, binary, name, ns, logsEnv string, extra ...string) *Process {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return Start(t, ProcessOptions{Binary: binary, Name: name, Args: append(NamespaceArgs(kubeconfig, ns), extra...), LogsEnv: logsEnv})
}

// NamespaceArgs are StartOnNamespace's flags: the operator on kubeconfig's
// cluster, watching ns and electing its leader there.
func NamespaceArgs(kubeconfig, ns string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + ns,
		"--leader-elect-namespace=" + ns,
		"-v=2",
	}
}

// NewNamespace creates a namespace named after the test (never deleted:
// there is no namespace controller; it goes with the environment).
func NewNamespace(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	prefix := DNSName(t.Name())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix[:min(40, len(prefix))] + "-"}}
	created, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return created.Name
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// DNSName lower-cases s and turns every run of other characters into "-".
func DNSName(s string) string {
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
}
