package proxytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a proxy may take to start listening.
const startTimeout = 20 * time.Second

// stopTimeout bounds how long a proxy may take to exit after SIGTERM before
// it is killed.
const stopTimeout = 10 * time.Second

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a child process whose combined output is kept and scanned
// line by line.
type process struct {
	name   string
	cmd    *exec.Cmd
	output syncBuffer
	exited chan struct{} // closed when Wait returned
	err    error         // Wait's result, valid after exited

	lineMu  sync.Mutex
	onLine  func(string)
	stopped sync.Once
}

// startProcess starts argv with env, feeding every output line to onLine
// (called from one goroutine) and into the process's log.
func startProcess(t testing.TB, name string, argv, env []string, onLine func(string)) *process {
	t.Helper()
	p := &process{name: name, exited: make(chan struct{}), onLine: onLine}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.SysProcAttr = sysProcAttr()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatalf("proxytest: pipe: %v", err)
	}
	p.cmd.Stdout = pw
	p.cmd.Stderr = pw
	if err := p.cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		t.Fatalf("proxytest: starting %s: %v", name, err)
	}
	pw.Close()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(&p.output, line)
			p.lineMu.Lock()
			if p.onLine != nil {
				p.onLine(line)
			}
			p.lineMu.Unlock()
		}
		_, _ = io.Copy(&p.output, pr)
		pr.Close()
	}()
	go func() {
		err := p.cmd.Wait()
		<-scanned // all output is in p.output before exited closes
		p.err = err
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("output of %s (%s):\n%s", name, strings.Join(argv, " "), p.output.String())
		}
	})
	return p
}

// stop sends SIGTERM, waits up to stopTimeout, then kills. It returns Wait's
// error (nil for exit status 0).
func (p *process) stop(t testing.TB) error {
	p.stopped.Do(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(stopTimeout)
		defer timer.Stop()
		select {
		case <-p.exited:
		case <-timer.C:
			t.Errorf("proxytest: %s did not exit %v after SIGTERM; killing it", p.name, stopTimeout)
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	<-p.exited
	return p.err
}

// waitFor polls cond every few milliseconds until it is true, the process
// exits, or timeout passes.
func (p *process) waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-p.exited:
			if cond() {
				return nil
			}
			return fmt.Errorf("%s exited (%v) before %s", p.name, p.err, what)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s after %v", p.name, what, timeout)
		}
	}
}

var errNotFound = errors.New("not found")

// findBinary looks name up in $PATH and then in dirs.
func findBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := d + "/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errNotFound
}

// environ returns os.Environ without the variables named in drop, plus add.
func environ(drop []string, add ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return append(env, add...)
}
