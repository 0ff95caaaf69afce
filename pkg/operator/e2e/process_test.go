package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/proxyfleet/proxy-operator/pkg/operator/operatortest"
)

// pollInterval is how often tests look again; every wait has a deadline.
const pollInterval = 200 * time.Millisecond

// leaseTimings are short leader-election settings, so a lost lease shows
// within a test's patience.
var leaseTimings = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=500ms",
}

// operatorProcess is one cmd/proxy-operator process under test.
type operatorProcess struct {
	name       string
	cmd        *exec.Cmd
	metricsURL string
	leaseAddr  string
	logPath    string
	exited     chan struct{}
	waitErr    error // set before exited closes
}

// writeTokenKubeconfig writes a kubeconfig that authenticates with cfg's
// bearer token only: no client certificate, so the ServiceAccount's RBAC is
// all the process has.
func writeTokenKubeconfig(path string, cfg *rest.Config) error {
	const name = "testenv"
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "operator"}
	c.CurrentContext = name
	return clientcmd.WriteToFile(*c, path)
}

// startOperator runs the operator with kubeconfig and args (metrics and
// lease addresses are added). It is killed when the test ends, and its log
// is printed if the test failed (or E2E_LOGS is set).
func startOperator(t *testing.T, name, kubeconfig string, extraEnv []string, args ...string) *operatorProcess {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 2)
	args = append([]string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--lease-addr=127.0.0.1:%d", ports[1]),
	}, args...)
	p := &operatorProcess{
		name:       name,
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		leaseAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
		logPath:    filepath.Join(dir, "operator.log"),
		exited:     make(chan struct{}),
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(operatorBinary, args...)
	// stdout and stderr both: klog writes to stderr, but a leak through a
	// stray fmt.Print would land on stdout.
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// No $KUBECONFIG or $POD_NAME from the developer's shell.
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE=")
	p.cmd.Env = append(p.cmd.Env, extraEnv...)
	if operatortest.RaceEnabled && os.Getenv("GORACE") == "" {
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
		p.kill()
		if t.Failed() || os.Getenv("E2E_LOGS") != "" {
			t.Logf("log of operator %s:\n%s", name, p.logs())
		}
	})
	return p
}

// kill ends the process with SIGKILL, if it still runs, and waits for it.
func (p *operatorProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// terminate sends SIGTERM and returns the exit code, failing the test if the
// process is still running after timeout or died of a signal.
func (p *operatorProcess) terminate(t *testing.T, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signalling operator %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("operator %s still running %v after SIGTERM", p.name, timeout)
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

// running reports whether the process has not exited yet.
func (p *operatorProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// alive returns nil while the process runs, else an errHopeless saying how
// it ended.
func (p *operatorProcess) alive() error {
	if p.running() {
		return nil
	}
	return fmt.Errorf("%w: the operator exited (%v)", errHopeless, p.waitErr)
}

// logs returns everything the process wrote so far.
func (p *operatorProcess) logs() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
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

// value is the value of the series of name whose labels include want (a
// counter's or gauge's value, a histogram's count); false if there is none.
// Several matching series are added up.
func (s scraped) value(name string, want map[string]string) (float64, bool) {
	var total float64
	found := false
	for _, m := range s[name].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			total += float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// metric reads one value from a fresh scrape: 0 and an error if the process
// does not answer or has no such series.
func (p *operatorProcess) metric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	s, err := p.scrape(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := s.value(name, labels)
	if !ok {
		return 0, fmt.Errorf("no series %s%v", name, labels)
	}
	return v, nil
}

// logLines returns the lines of the log that match re.
func (p *operatorProcess) logLines(re *regexp.Regexp) []string {
	var out []string
	for line := range strings.Lines(p.logs()) {
		if re.MatchString(line) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return out
}

// errHopeless marks a check's complaint that no wait can fix (the process
// it waits for has exited): poll gives up at once.
var errHopeless = errors.New("hopeless")

// poll calls check until it returns nil or ctx ends; it returns check's
// last complaint from before ctx ended (a check cut off by the deadline
// complains about the deadline, which says nothing).
func poll(ctx context.Context, check func(ctx context.Context) error) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, errHopeless) {
			return err
		}
		if last == nil || ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-ticker.C:
		}
	}
}

// eventually polls check until it returns nil, and fails the test with its
// last error once timeout has passed.
func eventually(t *testing.T, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := poll(ctx, check); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

var (
	portsMu sync.Mutex
	// portsHandedOut keeps two parallel runs from being given the same port
	// between its release here and the operator's bind.
	portsHandedOut = map[int]bool{}
)

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		port := l.Addr().(*net.TCPAddr).Port
		if portsHandedOut[port] {
			continue
		}
		portsHandedOut[port] = true
		ports = append(ports, port)
	}
	return ports
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// dnsName turns s into a DNS label's characters (not its length).
func dnsName(s string) string {
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
}
