package operator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/operator/operatortest"
)

// pollInterval is how often tests look again; waits are bounded by a deadline.
const pollInterval = 100 * time.Millisecond

// operatorProcess is one cmd/proxy-operator process under test.
type operatorProcess struct {
	name       string
	cmd        *exec.Cmd
	metricsURL string
	logPath    string
	exited     chan struct{}
	waitErr    error // set before exited closes
}

// leaseTimings are short leader-election settings, so failover fits a test.
var leaseTimings = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=500ms",
}

// startOperator runs the operator against env with flags for ns (its
// Proxies and its Lease) plus extra; it is killed when the test ends and
// its log is printed if the test failed (or OPERATOR_TEST_LOGS is set).
func startOperator(t *testing.T, name, ns string, extra ...string) *operatorProcess {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + ns,
		"--leader-elect-namespace=" + ns,
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--lease-addr=127.0.0.1:%d", ports[1]),
		"-v=2",
	}, extra...)
	p := &operatorProcess{
		name:       name,
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		logPath:    filepath.Join(dir, name+".log"),
		exited:     make(chan struct{}),
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(operatorBinary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// No $KUBECONFIG from the developer's shell: the flag must be what counts.
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=")
	if operatortest.RaceEnabled && os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps a second before exiting by default;
		// that would blur the shutdown timings measured here.
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting operator %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() || os.Getenv("OPERATOR_TEST_LOGS") != "" {
			logs, _ := os.ReadFile(p.logPath)
			t.Logf("log of operator %s:\n%s", name, logs)
		}
	})
	return p
}

// kill ends the process with SIGKILL: no drain, no lease release.
func (p *operatorProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing operator %s: %v", p.name, err)
	}
	<-p.exited
}

// signal sends sig to the process.
func (p *operatorProcess) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling operator %s: %v", p.name, err)
	}
}

// waitExit waits up to timeout for the process to exit and returns its exit code.
func (p *operatorProcess) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("operator %s still running %v after being asked to stop", p.name, timeout)
	}
	var exitErr *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0
	case errors.As(p.waitErr, &exitErr):
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			t.Fatalf("operator %s died of %v", p.name, status.Signal())
		}
		return exitErr.ExitCode()
	default:
		t.Fatalf("operator %s: %v", p.name, p.waitErr)
		return -1
	}
}

func (p *operatorProcess) logs(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// get fetches path from the metrics server.
func (p *operatorProcess) get(ctx context.Context, path string) (int, []byte, error) {
	return operatortest.Get(ctx, p.metricsURL+path)
}

// scrape reads /metrics.
func (p *operatorProcess) scrape(ctx context.Context) (scraped, error) {
	families, err := operatortest.Scrape(ctx, p.metricsURL)
	if err != nil {
		return nil, fmt.Errorf("operator %s: %w", p.name, err)
	}
	return families, nil
}

// scraped is one scrape, by metric name.
type scraped map[string]*dto.MetricFamily

// sum adds up every series of a counter or gauge.
func (s scraped) sum(name string) float64 {
	var total float64
	for _, m := range s[name].GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// leader is the proxy_operator_leader gauge: 1 while the process leads.
func (p *operatorProcess) leader(ctx context.Context) (float64, error) {
	s, err := p.scrape(ctx)
	if err != nil {
		return 0, err
	}
	if _, ok := s["proxy_operator_leader"]; !ok {
		return 0, errors.New("no proxy_operator_leader in /metrics")
	}
	return s.sum("proxy_operator_leader"), nil
}

// eventually polls check until it returns nil, and fails the test with its
// last error once timeout has passed.
func eventually(t *testing.T, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		case <-ticker.C:
		}
	}
}

// waitForLeader waits until exactly one of ps leads and returns it and the others.
func waitForLeader(t *testing.T, timeout time.Duration, ps ...*operatorProcess) (leader *operatorProcess, standbys []*operatorProcess) {
	t.Helper()
	eventually(t, timeout, "one operator leads", func(ctx context.Context) error {
		leader, standbys = nil, nil
		var leading []string
		for _, p := range ps {
			v, err := p.leader(ctx)
			if err != nil {
				return err
			}
			if v == 1 {
				leader = p
				leading = append(leading, p.name)
			} else {
				standbys = append(standbys, p)
			}
		}
		if len(leading) != 1 {
			return fmt.Errorf("leading: %q", leading)
		}
		return nil
	})
	return leader, standbys
}

// waitReady waits until /readyz of p says 200.
func waitReady(t *testing.T, p *operatorProcess, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "operator "+p.name+" ready", func(ctx context.Context) error {
		code, body, err := p.get(ctx, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func clients(t *testing.T) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	return kubernetes.NewForConfigOrDie(env.Config), versioned.NewForConfigOrDie(env.Config)
}

// newNamespace creates a namespace of the test's own (never deleted: there
// is no namespace controller; it goes with the environment).
func newNamespace(t *testing.T) string {
	t.Helper()
	kube, _ := clients(t)
	prefix := dnsName(t.Name())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix[:min(40, len(prefix))] + "-"}}
	created, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return created.Name
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

func dnsName(s string) string {
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// createExternalProxy creates an External Proxy at 127.0.0.1:port.
func createExternalProxy(t *testing.T, ns, name string, port int32) {
	t.Helper()
	_, crawl := clients(t)
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: port},
		},
	}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Proxy %s/%s: %v", ns, name, err)
	}
}

// waitConverged waits until every Proxy in ns has status for its current
// generation: observedGeneration, the Provisioned condition, the endpoint.
func waitConverged(t *testing.T, ns string, want int, timeout time.Duration) {
	t.Helper()
	_, crawl := clients(t)
	eventually(t, timeout, "every Proxy reconciled", func(ctx context.Context) error {
		list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("%d Proxies, want %d", len(list.Items), want)
		}
		var behind []string
		for _, p := range list.Items {
			if !converged(&p) {
				behind = append(behind, fmt.Sprintf("%s (generation %d, status %+v)", p.Name, p.Generation, p.Status))
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("not reconciled: %s", strings.Join(behind, "; "))
		}
		return nil
	})
}

func converged(p *crawlv1alpha1.Proxy) bool {
	if p.Status.ObservedGeneration != p.Generation || p.Spec.Endpoint == nil {
		return false
	}
	if p.Status.IP != p.Spec.Endpoint.Host || p.Status.Port != p.Spec.Endpoint.Port {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == crawlv1alpha1.ConditionProvisioned {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
		}
	}
	return false
}

// leaseHolder reads the holder of the operator's Lease in ns.
func leaseHolder(ctx context.Context, t *testing.T, ns string) (string, error) {
	kube, _ := clients(t)
	lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, "proxy-operator", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
