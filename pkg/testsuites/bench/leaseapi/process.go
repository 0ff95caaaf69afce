package main

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

	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// The benchmark's child processes: the operators and the trivial handler.

// process is a child (the operator or the trivial handler) on free
// loopback ports, its output in a file; Pdeathsig ends it with the bench.
type process struct {
	cmd     *exec.Cmd
	ports   []int
	logPath string
	exited  chan struct{}
	waitErr error
}

func startProcess(logPath, binary string, args func(ports []int) []string) (*process, error) {
	ports, err := benchkit.FreePorts(2)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &process{ports: ports, logPath: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, args(ports)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE=")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) addr(i int) string { return "127.0.0.1:" + strconv.Itoa(p.ports[i]) }
func (p *process) pid() int          { return p.cmd.Process.Pid }

func (p *process) exitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v\n--- last lines of %s ---\n%s", p.cmd.Path, p.waitErr, p.logPath, p.tail(30))
	default:
		return nil
	}
}

func (p *process) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *process) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
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

// waitReady polls url until it answers 200 or the process exits.
func waitReady(ctx context.Context, p *process, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.exitErr(); err != nil {
			return err
		}
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not answering 200 after %v\n--- last lines of %s ---\n%s", url, timeout, p.logPath, p.tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cpuSeconds is a process's utime+stime so far.
func cpuSeconds(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil
}
