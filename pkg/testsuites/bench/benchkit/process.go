package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a child of a bench program on loopback ports of its own, its
// output in a file, without KUBECONFIG or a Pod identity from the bench's
// environment (so that its flags alone count); Pdeathsig ends it with the
// bench.
type Process struct {
	Cmd     *exec.Cmd
	Ports   []int
	LogPath string
	exited  chan struct{}
	waitErr error // set before exited closes
}

// Start runs binary with the arguments args makes of nPorts free loopback
// ports, and reaps it when it exits.
func Start(binary, logPath string, nPorts int, args func(ports []int) []string) (*Process, error) {
	ports, err := FreePorts(nPorts)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{Ports: ports, LogPath: logPath, exited: make(chan struct{})}
	p.Cmd = exec.Command(binary, args(ports)...)
	p.Cmd.Stdout, p.Cmd.Stderr = logFile, logFile
	p.Cmd.Env = append(os.Environ(), "KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE=")
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		p.waitErr = p.Cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// StartOperator starts the operator binary with args after its metrics
// address (Addr(0)) and lease API address (Addr(1)) on free loopback ports.
func StartOperator(binary, logPath string, args ...string) (*Process, error) {
	return Start(binary, logPath, 2, func(ports []int) []string {
		return append([]string{"--metrics-addr=" + loopback(ports[0]), "--lease-addr=" + loopback(ports[1])}, args...)
	})
}

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// Addr is the host:port of the process's i-th port.
func (p *Process) Addr(i int) string { return loopback(p.Ports[i]) }

// PID is the process's id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr is non-nil once the process has exited, with its log's last lines.
func (p *Process) ExitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v\n--- last lines of its log (%s) ---\n%s", p.Cmd.Path, p.waitErr, p.LogPath, p.Tail(30))
	default:
		return nil
	}
}

// Kill ends the process with SIGKILL, if it still runs, and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Tail is the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WaitReady polls url until it answers 200, the process exits or timeout
// passes.
func (p *Process) WaitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.ExitErr(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not answering 200 after %v\n--- last lines of its log (%s) ---\n%s", url, timeout, p.LogPath, p.Tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
