package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
)

// The processes under test: cmd/forward-proxy (the upstream, as a Pod
// instance runs it), cmd/proxy-operator (the lease API) and the gateway:
// `proxy-operator gateway` replicas (the tier, as installed). Each is a
// process of its own so that its CPU can be counted and placed apart.

// child is a process the bench started and kills at the end.
type child struct {
	name string
	cmd  *exec.Cmd
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) stop() {
	_ = c.cmd.Process.Kill()
	_, _ = c.cmd.Process.Wait()
}

// start runs binary with args, its output in logPath; it dies with the bench.
func start(name, binary, logPath string, env []string, args ...string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logFile.Close() // the child holds its own descriptor
	return &child{name: name, cmd: cmd}, nil
}

// freePort is a loopback port free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// buildBinaries builds what is not given into dir.
func buildBinaries(ctx context.Context, dir, operator string) (operatorBin, forwardProxyBin string, err error) {
	pkgs := []string{"github.com/proxyfleet/proxy-operator/cmd/forward-proxy"}
	if operator == "" {
		pkgs = append(pkgs, "github.com/proxyfleet/proxy-operator/cmd/proxy-operator")
		operator = filepath.Join(dir, "proxy-operator")
	}
	build := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("go build: %w", err)
	}
	if operatorBin = filepath.Join(dir, "proxy-operator"); operator != operatorBin {
		// The operator's local provider wants its forward-proxy beside it.
		data, err := os.ReadFile(operator)
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(operatorBin, data, 0o755); err != nil {
			return "", "", err
		}
	}
	return operatorBin, filepath.Join(dir, "forward-proxy"), nil
}

// waitDial waits until addr accepts connections.
func waitDial(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening within %v: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// selfCPU is this process's CPU time so far (the clients and the origins).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSpent is the CPU time each party used during one measurement.
type cpuSpent struct {
	load, upstream, gateway time.Duration
	// leases is the operator's (the lease API's).
	leases time.Duration
}

// meter reads the CPU counters of the parties: the gateway replicas are
// summed; leasesPID is the operator's.
type meter struct {
	upstreamPID, leasesPID int
	gatewayPIDs            []int
}

func (m meter) read() (cpuSpent, error) {
	c := cpuSpent{load: selfCPU()}
	var err error
	if c.upstream, err = procstat.CPU(m.upstreamPID); err != nil {
		return cpuSpent{}, err
	}
	for _, pid := range m.gatewayPIDs {
		gw, err := procstat.CPU(pid)
		if err != nil {
			return cpuSpent{}, err
		}
		c.gateway += gw
	}
	if c.leases, err = procstat.CPU(m.leasesPID); err != nil {
		return cpuSpent{}, err
	}
	return c, nil
}

func (c cpuSpent) minus(o cpuSpent) cpuSpent {
	return cpuSpent{load: c.load - o.load, upstream: c.upstream - o.upstream, gateway: c.gateway - o.gateway, leases: c.leases - o.leases}
}

// pin sets the CPU affinity of every thread of pid (taskset from
// util-linux); threads created later inherit it from their creator.
func pin(pid int, cpus string) error {
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset is missing: install util-linux (hack/install-deps.sh, make deps): %w", err)
	}
	out, err := exec.Command("taskset", "-a", "-c", "-p", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -c -p %s %d: %w: %s", cpus, pid, err, out)
	}
	return nil
}
