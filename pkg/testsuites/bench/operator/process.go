package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// operatorProcess is one cmd/proxy-operator child, with its lease API and
// metrics server on loopback ports of its own and its output in a file.
type operatorProcess struct {
	cmd        *exec.Cmd
	leaseAddr  string
	metricsURL string // http://127.0.0.1:<port> of /metrics
	logPath    string
	exited     chan struct{}
	waitErr    error // set before exited closes
}

// startOperator runs binary with args after --metrics-addr and --lease-addr
// on free loopback ports. The environment drops KUBECONFIG and POD_* so
// that the flags alone count; Pdeathsig ends it with the bench.
func startOperator(binary, logPath string, args []string) (*operatorProcess, error) {
	ports, err := benchkit.FreePorts(2)
	if err != nil {
		return nil, err
	}
	p := &operatorProcess{
		leaseAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		logPath:    logPath,
		exited:     make(chan struct{}),
	}
	args = append([]string{
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
		"--lease-addr=" + p.leaseAddr,
	}, args...)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE=")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *operatorProcess) pid() int { return p.cmd.Process.Pid }

// exitErr is non-nil once the process has exited.
func (p *operatorProcess) exitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("the operator exited: %v\n--- last lines of its log (%s) ---\n%s", p.waitErr, p.logPath, p.tail(30))
	default:
		return nil
	}
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

// waitLeader waits until the lease API's /readyz answers 200: the process
// leads and runs the controller and the health engine.
func (p *operatorProcess) waitLeader(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.exitErr(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.leaseAddr+"/readyz", nil)
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
			return fmt.Errorf("not leading after %v\n--- last lines of its log (%s) ---\n%s", timeout, p.logPath, p.tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// saveHeapProfile writes the operator's heap profile (it runs with
// --profiling) to path. gc=1 collects first, so the profile's in-use
// figures are the live heap, not garbage awaiting a cycle.
func (p *operatorProcess) saveHeapProfile(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/heap: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tail returns the last n lines of the process's log.
func (p *operatorProcess) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// usage is a process's CPU time so far and its memory now, from /proc.
type usage struct {
	cpuSeconds float64
	rss, hwm   int64 // bytes: VmRSS, VmHWM (peak RSS since start)
}

func readUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 14th and 15th fields of the line.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	u.cpuSeconds = (utime + stime) / 100 // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			u.rss = kb << 10
		case "VmHWM":
			u.hwm = kb << 10
		}
	}
	if u.rss == 0 {
		return u, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return u, nil
}
