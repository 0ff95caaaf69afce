package operatortest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is one cmd/proxy-operator process under test, with its metrics
// and lease servers on loopback ports of its own.
type Process struct {
	Name string
	// MetricsURL is http://127.0.0.1:<port> of /metrics, /healthz, /readyz.
	MetricsURL string
	// LeaseAddr is 127.0.0.1:<port> of the lease API; for a gateway
	// (ProcessOptions.Gateway), its --listen address.
	LeaseAddr string
	// LogPath holds everything the process wrote to stdout and stderr.
	LogPath string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited closes
}

// ProcessOptions say how to start a Process.
type ProcessOptions struct {
	// Binary is cmd/proxy-operator (the one Run built).
	Binary string
	// Name names the process in logs and failures.
	Name string
	// Args are the operator's flags; --metrics-addr and --lease-addr are
	// added in front.
	Args []string
	// Gateway runs `proxy-operator gateway` instead: --metrics-addr and
	// --listen (LeaseAddr) are added in front of Args.
	Gateway bool
	// Env is added to the environment, which otherwise is this process's
	// without KUBECONFIG, POD_NAME and POD_NAMESPACE: flags must be what
	// counts, not the developer's shell.
	Env []string
	// LogsEnv names an environment variable that, when set, prints the
	// process's log at the end of a passing test too.
	LogsEnv string
}

// Start runs the operator. It is killed when the test ends, and its log is
// printed if the test failed.
func Start(t *testing.T, opts ProcessOptions) *Process {
	t.Helper()
	dir := t.TempDir()
	ports := FreePorts(t, 2)
	p := &Process{
		Name:       opts.Name,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		LeaseAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
		LogPath:    filepath.Join(dir, opts.Name+".log"),
		exited:     make(chan struct{}),
	}
	args := append([]string{
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--lease-addr=127.0.0.1:%d", ports[1]),
	}, opts.Args...)
	if opts.Gateway {
		args = append([]string{"gateway",
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("--listen=127.0.0.1:%d", ports[1]),
		}, opts.Args...)
	}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(opts.Binary, args...)
	// stdout too: a stray fmt.Print would land there.
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE=")
	if RaceEnabled && os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps a second before exiting by default;
		// that would blur shutdown timings.
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	p.cmd.Env = append(p.cmd.Env, opts.Env...)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting operator %s: %v", opts.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() || (opts.LogsEnv != "" && os.Getenv(opts.LogsEnv) != "") {
			t.Logf("log of operator %s:\n%s", opts.Name, p.Logs())
		}
	})
	return p
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill ends the process with SIGKILL (no drain, no lease release), if it
// still runs, and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling operator %s: %v", p.Name, err)
	}
}

// WaitExit waits up to timeout for the process to exit and returns its exit
// code; it fails the test if the process is still running or died of a
// signal.
func (p *Process) WaitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("operator %s still running %v after being asked to stop", p.Name, timeout)
	}
	var exitErr *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0
	case errors.As(p.waitErr, &exitErr):
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			t.Fatalf("operator %s died of %v", p.Name, status.Signal())
		}
		return exitErr.ExitCode()
	default:
		t.Fatalf("operator %s: %v", p.Name, p.waitErr)
		return -1
	}
}

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exit describes how the process ended ("" while it runs).
func (p *Process) Exit() string {
	if p.Running() {
		return ""
	}
	return fmt.Sprintf("exited: %v", p.waitErr)
}

// Logs returns everything the process wrote so far.
func (p *Process) Logs() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	return string(data)
}

// Get fetches path from the metrics server.
func (p *Process) Get(ctx context.Context, path string) (int, []byte, error) {
	return Get(ctx, p.MetricsURL+path)
}

// Scrape reads the process's /metrics.
func (p *Process) Scrape(ctx context.Context) (Scraped, error) {
	s, err := Scrape(ctx, p.MetricsURL)
	if err != nil {
		return nil, fmt.Errorf("operator %s: %w", p.Name, err)
	}
	return s, nil
}

var (
	portsMu sync.Mutex
	// portsHandedOut keeps two processes started at once from being given
	// the same port between its release here and the operator's bind.
	portsHandedOut = map[int]bool{}
)

// FreePorts returns n loopback ports that were free a moment ago and that
// no earlier call returned.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		// Held until the end, so the kernel does not hand it out again here.
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		if portsHandedOut[port] {
			continue
		}
		portsHandedOut[port] = true
		ports = append(ports, port)
	}
	return ports
}
