package e2e_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
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

// operatorProcess is one cmd/proxy-operator process under test, with the
// checks this package makes of it.
type operatorProcess struct{ *operatortest.Process }

// startOperator runs the operator with kubeconfig and args (metrics and
// lease addresses are added). It is killed when the test ends, and its log
// is printed if the test failed (or E2E_LOGS is set).
func startOperator(t *testing.T, name, kubeconfig string, extraEnv []string, args ...string) operatorProcess {
	t.Helper()
	return operatorProcess{operatortest.Start(t, operatortest.ProcessOptions{
		Binary:  shared.Get(t).Binary,
		Name:    name,
		Args:    append([]string{"--kubeconfig=" + kubeconfig}, args...),
		Env:     extraEnv,
		LogsEnv: "E2E_LOGS",
	})}
}

// terminate sends SIGTERM and returns the exit code, failing the test if the
// process is still running after timeout or died of a signal.
func (p operatorProcess) terminate(t *testing.T, timeout time.Duration) int {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	return p.WaitExit(t, timeout)
}

// alive returns nil while the process runs, else an eventually.ErrHopeless saying how
// it ended.
func (p operatorProcess) alive() error {
	if p.Running() {
		return nil
	}
	return fmt.Errorf("%w: the operator %s", eventually.ErrHopeless, p.Exit())
}

// metric reads one value from a fresh scrape: 0 and an error if the process
// does not answer or has no such series.
func (p operatorProcess) metric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	s, err := p.Scrape(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := s.Value(name, labels)
	if !ok {
		return 0, fmt.Errorf("no series %s%v", name, labels)
	}
	return v, nil
}

// logLines returns the lines of the log that match re.
func (p operatorProcess) logLines(re *regexp.Regexp) []string {
	var out []string
	for line := range strings.Lines(p.Logs()) {
		if re.MatchString(line) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return out
}
