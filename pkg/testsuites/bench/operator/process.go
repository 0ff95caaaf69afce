package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// operatorProcess is one cmd/proxy-operator child (benchkit.StartOperator),
// with its lease API and metrics server on loopback ports of its own.
type operatorProcess struct {
	*benchkit.Process
	leaseAddr  string
	metricsURL string // http://127.0.0.1:<port> of /metrics
}

// startOperator runs binary with args after --metrics-addr and --lease-addr
// on free loopback ports.
func startOperator(binary, logPath string, args []string) (*operatorProcess, error) {
	p, err := benchkit.StartOperator(binary, logPath, args...)
	if err != nil {
		return nil, err
	}
	return &operatorProcess{Process: p, leaseAddr: p.Addr(1), metricsURL: "http://" + p.Addr(0)}, nil
}

// waitLeader waits until the lease API's /readyz answers 200: the process
// leads and runs the controller and the health engine.
func (p *operatorProcess) waitLeader(ctx context.Context, timeout time.Duration) error {
	return p.WaitReady(ctx, "http://"+p.leaseAddr+"/readyz", timeout)
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

// usage is a process's CPU time so far and its memory now, from /proc.
type usage struct {
	cpuSeconds float64
	rss, hwm   int64 // bytes: VmRSS, VmHWM (peak RSS since start)
}

func readUsage(pid int) (usage, error) {
	var u usage
	cpu, err := procstat.CPU(pid)
	if err != nil {
		return u, err
	}
	u.cpuSeconds = cpu.Seconds()
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
