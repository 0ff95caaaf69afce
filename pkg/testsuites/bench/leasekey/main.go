// Command leasekey measures what checking lease credentials costs the
// forward-proxy (issue 63): CONNECTs per second through cmd/forward-proxy
// on loopback, each a fresh client connection, a CONNECT and its 200, to a
// target that closes at once, from concurrent clients. Three sides take
// turns, round after round:
//
//	before: the forward-proxy built at -baseline-ref (before lease keys),
//	        static credentials;
//	static: this tree's, with a lease key, the static credentials;
//	leased: this tree's, with a lease key, each client a lease's signed
//	        credentials (verified, the lease tracked, its tunnel attached).
//
// Target: leased at least 0.9x before's median CONNECTs/s. The proxy's CPU
// per CONNECT (from /proc, which other tenants of a shared machine do not
// inflate) is shown beside it.
//
//	go run ./pkg/testsuites/bench/leasekey
//	go run ./pkg/testsuites/bench/leasekey -rounds 7 -round 5s -clients 32
//
// It prints markdown on stdout and progress on stderr. It is a
// measurement, not a test: it asserts nothing.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

var (
	baselineRef = flag.String("baseline-ref", "3304d73", "git ref whose cmd/forward-proxy is the before side (main before lease keys)")
	rounds      = flag.Int("rounds", 7, "rounds per side, interleaved")
	roundLen    = flag.Duration("round", 4*time.Second, "length of one round")
	clients     = flag.Int("clients", 32, "concurrent clients")
)

const (
	user     = "crawler"
	password = "static-password-of-the-instance"
	// allow admits the loopback target past the egress guard.
	allow = "127.0.0.0/8"
)

func progress(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func main() {
	flag.Parse()
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "leasekey bench:", err)
		os.Exit(1)
	}
}

// side is one proxy and the credentials its clients send.
type side struct {
	name  string
	proc  *benchkit.Process
	auths []string // one Proxy-Authorization per client
}

type result struct {
	perSec     float64
	cpuPerConn time.Duration
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "leasekey-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	progress("building cmd/forward-proxy here and at %s", *baselineRef)
	if err := benchkit.Build(ctx, dir, "forward-proxy"); err != nil {
		return err
	}
	baseline, err := buildBaseline(ctx, dir, *baselineRef)
	if err != nil {
		return err
	}
	keyText, err := leasecred.NewKeyText()
	if err != nil {
		return err
	}
	keys, err := leasecred.ParseKeys(keyText)
	if err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "lease-key")
	if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
		return err
	}
	target, stop, err := closingTarget()
	if err != nil {
		return err
	}
	defer stop()

	static := make([]string, *clients)
	leased := make([]string, *clients)
	for i := range *clients {
		static[i] = basic(user, password)
		// A lease per client, ending after the bench.
		claims := leasecred.Claims{Ref: leasecred.Ref{Epoch: 1, Serial: uint64(i + 1)}, End: time.Now().Add(time.Hour)}
		leased[i] = basic(user, leasecred.Sign(keys[0], user, claims))
	}
	sides := []*side{{name: "before (" + *baselineRef + ")", auths: static}, {name: "static (this tree, keyed)", auths: static}, {name: "leased (this tree, keyed)", auths: leased}}
	binaries := []string{baseline, filepath.Join(dir, "forward-proxy"), filepath.Join(dir, "forward-proxy")}
	keyed := []bool{false, true, true}
	// The children take the static credentials from the environment, which
	// benchkit.Start passes on.
	if err := os.Setenv("PROXY_USERNAME", user); err != nil {
		return err
	}
	if err := os.Setenv("PROXY_PASSWORD", password); err != nil {
		return err
	}
	for i, s := range sides {
		args := func(ports []int) []string {
			a := []string{fmt.Sprintf("--listen=127.0.0.1:%d", ports[0]), "--allow-cidr=" + allow, "--max-conns=0", "-v=0"}
			if keyed[i] {
				a = append(a, "--lease-key-file="+keyFile)
			}
			return a
		}
		p, err := benchkit.Start(binaries[i], filepath.Join(dir, fmt.Sprintf("proxy-%d.log", i)), 1, args)
		if err != nil {
			return err
		}
		defer p.Cmd.Process.Kill()
		s.proc = p
		if err := waitListening(p.Addr(0)); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	results := make([][]result, len(sides))
	for r := range *rounds {
		for i, s := range sides {
			res, err := measure(s, target)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, r+1, err)
			}
			results[i] = append(results[i], res)
			progress("round %d %s: %.0f CONNECT/s, %v CPU each", r+1, s.name, res.perSec, res.cpuPerConn)
		}
	}
	report(sides, results)
	return nil
}

// measure runs the clients against s for one round.
func measure(s *side, target string) (result, error) {
	cpu0, err := procstat.CPU(s.proc.PID())
	if err != nil {
		return result{}, err
	}
	var (
		n        atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(*roundLen)
	start := time.Now()
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + s.auths[i] + "\r\n\r\n"
			for time.Now().Before(deadline) {
				if err := connectOnce(s.proc.Addr(0), req); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return result{}, *e
	}
	cpu1, err := procstat.CPU(s.proc.PID())
	if err != nil {
		return result{}, err
	}
	count := n.Load()
	return result{perSec: float64(count) / elapsed.Seconds(), cpuPerConn: (cpu1 - cpu0) / time.Duration(max(count, 1))}, nil
}

func connectOnce(proxy, req string) error {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT answered %d", resp.StatusCode)
	}
	return nil
}

func report(sides []*side, results [][]result) {
	fmt.Printf("%d clients, %d rounds of %v per side, interleaved; each CONNECT a fresh connection to a loopback target that closes at once.\n\n", *clients, *rounds, *roundLen)
	fmt.Println("| side | CONNECT/s median | min–max | proxy CPU per CONNECT (median) |")
	fmt.Println("|---|---:|---|---:|")
	medians := make([]float64, len(sides))
	for i, s := range sides {
		var rates []float64
		var cpus []time.Duration
		for _, r := range results[i] {
			rates = append(rates, r.perSec)
			cpus = append(cpus, r.cpuPerConn)
		}
		slices.Sort(rates)
		slices.Sort(cpus)
		medians[i] = rates[len(rates)/2]
		fmt.Printf("| %s | %.0f | %.0f–%.0f | %v |\n", s.name, medians[i], rates[0], rates[len(rates)-1], cpus[len(cpus)/2].Round(100*time.Nanosecond))
	}
	fmt.Printf("\nleased/before: %.2fx (target at least 0.9x); leased/static: %.2fx.\n", medians[2]/medians[0], medians[2]/medians[1])
	fmt.Print("\nRounds (CONNECT/s):\n\n| round |")
	for _, s := range sides {
		fmt.Printf(" %s |", s.name)
	}
	fmt.Print("\n|---:|" + strings.Repeat("---:|", len(sides)) + "\n")
	for r := range results[0] {
		fmt.Printf("| %d |", r+1)
		for i := range sides {
			fmt.Printf(" %.0f |", results[i][r].perSec)
		}
		fmt.Println()
	}
}

// closingTarget accepts connections on loopback and closes them at once.
func closingTarget() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }, nil
}

func waitListening(addr string) error {
	for range 100 {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s", addr)
}

func basic(u, p string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))
}

// buildBaseline builds cmd/forward-proxy at ref, in a worktree removed
// afterwards.
func buildBaseline(ctx context.Context, dir, ref string) (string, error) {
	tree := filepath.Join(dir, "baseline-src")
	if out, err := exec.CommandContext(ctx, "git", "worktree", "add", "--detach", tree, ref).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %w: %s", ref, err, out)
	}
	defer func() {
		if out, err := exec.Command("git", "worktree", "remove", "--force", tree).CombinedOutput(); err != nil {
			progress("removing the worktree %s: %v: %s", tree, err, out)
		}
	}()
	binary := filepath.Join(dir, "forward-proxy-baseline")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/forward-proxy")
	cmd.Dir, cmd.Stdout, cmd.Stderr = tree, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", ref, err)
	}
	return binary, nil
}
