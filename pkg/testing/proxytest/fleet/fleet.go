// Package fleet serves a fleet of loopback "proxies" from a child process,
// for the benchmarks (pkg/testsuites/bench/health, pkg/testsuites/bench/operator): n listeners on
// 127.77.x.y, each an HTTP server that answers every request with 204
// itself, as a proxy answering a plain-http probe would, optionally after a
// delay (a remote proxy's round trip).
//
// The fleet runs in a child process so that the measured process's CPU and
// RSS are its own. The child is the benchmark's own binary started again
// with -fleet n -delay d, so a program using Start must define those two
// flags and call Serve when -fleet is set:
//
//	if *fleetSize > 0 {
//		err := fleet.Serve(*fleetSize, *delay)
//		...
//	}
//
// It has no dependency on package testing.
package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
)

// The flags the child is started with.
const (
	SizeFlag  = "fleet"
	DelayFlag = "delay"
)

// IP is the loopback address of the i-th proxy (0-based): 127.77.x.y with y
// in 1..250, so 62,500 proxies fit.
func IP(i int) net.IP {
	return net.IPv4(127, 77, byte(i/250), byte(i%250+1))
}

// RaiseFileLimit lifts the soft RLIMIT_NOFILE to the hard one: the fleet
// holds one listener per proxy, and whatever probes it one connection per
// probe in flight.
func RaiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	return nil
}

// Process is the child serving the proxies.
type Process struct {
	cmd   *exec.Cmd
	stdin io.Closer
}

// Start runs this program again with -fleet n -delay delay and returns the
// child and the host:port of each of its n proxies. Stop ends it; it also
// ends when this process exits (its stdin closes).
func Start(n int, delay time.Duration) (*Process, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self, "-"+SizeFlag, strconv.Itoa(n), "-"+DelayFlag, delay.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the child exits when it closes
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &Process{cmd: cmd, stdin: stdin}
	var addrs []string
	line, err := bufio.NewReaderSize(stdout, 1<<20).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &addrs)
	}
	if err != nil || len(addrs) != n {
		p.Stop()
		return nil, nil, fmt.Errorf("the fleet did not start: %d addresses, %v", len(addrs), err)
	}
	return p, addrs, nil
}

// PID is the child's process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// CPUSeconds is the child's user+system CPU time so far, from /proc.
func (p *Process) CPUSeconds() float64 {
	d, err := procstat.CPU(p.PID())
	if err != nil {
		return 0
	}
	return d.Seconds()
}

// Stop closes the child's stdin and waits for it to exit.
func (p *Process) Stop() {
	p.stdin.Close()
	_ = p.cmd.Wait()
}

// ParseSizes parses a benchmark's -sizes flag: fleet sizes, comma-separated,
// each at least 1.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ServeIfChild is for a benchmark's main, right after flag.Parse: when this
// process is a fleet child (size > 0, from SizeFlag), it serves the fleet and
// exits; otherwise it returns at once.
func ServeIfChild(size int, delay time.Duration) {
	if size <= 0 {
		return
	}
	if err := Serve(size, delay); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve is the child: n listeners on 127.77.x.y (one port for all when it
// is free everywhere, so the listeners do not use up ephemeral ports), one
// HTTP server answering 204 to everything after delay, until stdin closes.
// It prints the addresses as one JSON array line on stdout first.
func Serve(n int, delay time.Duration) error {
	if err := RaiseFileLimit(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if delay > 0 {
				time.Sleep(delay)
			}
			w.WriteHeader(http.StatusNoContent)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false)
	first, err := net.Listen("tcp", net.JoinHostPort(IP(0).String(), "0"))
	if err != nil {
		return fmt.Errorf("listening on %s: %w", IP(0), err)
	}
	port := first.Addr().(*net.TCPAddr).Port
	listeners := []net.Listener{first}
	for i := 1; i < n; i++ {
		ip := IP(i).String()
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			l, err = net.Listen("tcp", net.JoinHostPort(ip, "0"))
		}
		if err != nil {
			return fmt.Errorf("listener %d of %d: %w", i+1, n, err)
		}
		listeners = append(listeners, l)
	}
	addrs := make([]string, len(listeners))
	for i, l := range listeners {
		addrs[i] = l.Addr().String()
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, "fleet: serve:", err)
			}
		}()
	}
	out, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it or exits
	return srv.Close()
}
