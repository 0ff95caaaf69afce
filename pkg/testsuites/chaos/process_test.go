package chaos_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// pollInterval is how often the process tests look again; every wait has a
// deadline.
const pollInterval = 100 * time.Millisecond

// startOperator runs the operator binary on ns (its Proxies and its leader
// Lease) with extra flags, the lease API without authentication.
func startOperator(t *testing.T, name, ns string, extra ...string) *operatortest.Process {
	t.Helper()
	return operatortest.StartOnNamespace(t, shared.Get(t).Env, shared.Get(t).Binary, name, ns, "CHAOS_LOGS", append([]string{"--lease-auth=none"}, extra...)...)
}

// startOperatorVia is startOperator on another kubeconfig (an
// operatortest.APIPartition's).
func startOperatorVia(t *testing.T, kubeconfig, name, ns string, extra ...string) *operatortest.Process {
	t.Helper()
	args := append(operatortest.NamespaceArgs(kubeconfig, ns), "--lease-auth=none")
	return operatortest.Start(t, operatortest.ProcessOptions{
		Binary: shared.Get(t).Binary, Name: name, Args: append(args, extra...), LogsEnv: "CHAOS_LOGS",
	})
}

// fastHealthCheck probes every second through the proxy to target (a
// loopback server: the default URL is on the internet).
func fastHealthCheck(target string) crawlv1alpha1.HealthCheck {
	return crawlv1alpha1.HealthCheck{
		URL:      target + "/generate_204",
		Interval: &metav1.Duration{Duration: time.Second},
		Timeout:  &metav1.Duration{Duration: 900 * time.Millisecond},
	}
}

// clients are admin clients of env.
func clients(t testing.TB) (kubernetes.Interface, versioned.Interface) {
	return kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
}

// newNamespace creates a namespace named after the test.
func newNamespace(t *testing.T) string {
	t.Helper()
	kube, _ := clients(t)
	return operatortest.NewNamespace(t, kube)
}

// localInstance is a state file of the local provider.
type localInstance = operatortest.LocalInstance

// localInstances reads the local provider's state directory.
func localInstances(t *testing.T, stateDir string) []localInstance {
	return operatortest.LocalInstances(t, stateDir)
}

// forwardProxyProcesses lists the live processes of the forward-proxy built
// beside the operator that the local provider started for stateDir: a
// process that no state file names is a leaked instance.
func forwardProxyProcesses(t *testing.T, stateDir string) []int {
	return operatortest.ForwardProxyProcesses(t, shared.Get(t).Binary, stateDir)
}

// killForwardProxies ends every local instance of stateDir, which would
// outlive a failed test.
func killForwardProxies(t *testing.T, stateDir string) {
	operatortest.KillForwardProxies(t, shared.Get(t).Binary, stateDir)
}
