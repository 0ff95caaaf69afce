package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// stopGrace is how long a child has to exit after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// tailBytes of each child's output are kept for error messages.
	tailBytes = 64 << 10
	tailLines = 30
)

// process is a child running in its own process group, so that stopping it also
// stops anything it started, and with Pdeathsig, so that it dies with the test
// binary even if Stop is never called.
type process struct {
	name string
	cmd  *exec.Cmd
	tail *tailBuffer
	done chan struct{} // closed when the child has exited and been reaped
	err  error         // Wait's result, set before done is closed
}

// startProcess starts bin with args; its stdout and stderr go to out and to a tail
// buffer; out is closed once the process has exited.
func startProcess(name, bin string, args []string, out io.WriteCloser) (*process, error) {
	tail := &tailBuffer{}
	cmd := exec.Command(bin, args...)
	w := io.MultiWriter(tail, out)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Do not hang in Wait if something the child started holds its output open.
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, tail: tail, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child has exited, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, SIGKILL after stopGrace, and waits until
// the child is reaped. Exiting because of the signal is not an error.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := p.pid() // Setpgid makes the child the leader of a group with its pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing %s: %w", p.name, err)
		}
		<-p.done
	}
	// Leftovers of the group, if the leader exited before its children.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// failure describes an exited or unready child with the tail of its output.
func (p *process) failure(err error) error {
	return fmt.Errorf("%s: %w\n--- last lines of %s output ---\n%s", p.name, err, p.name, p.tail.lastLines(tailLines))
}

// tailBuffer keeps the last tailBytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (t *tailBuffer) contains(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Contains(t.buf, []byte(s))
}

// prefixWriter writes whole lines to a shared writer, each prefixed, so that the
// output of two children can share Options.Out.
type prefixWriter struct {
	prefix string
	mu     *sync.Mutex // shared by all prefixWriters of one io.Writer
	out    io.Writer
	buf    []byte // an incomplete last line
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.mu.Lock()
		_, err := fmt.Fprintf(w.out, "%s%s\n", w.prefix, w.buf[:i])
		w.mu.Unlock()
		w.buf = w.buf[i+1:]
		if err != nil {
			return len(b), err
		}
	}
}

// Close flushes an incomplete last line.
func (w *prefixWriter) Close() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.Write([]byte("\n"))
	return err
}

// logOutput returns where a child's output goes: a prefixed writer on e.out, or
// Dir/<name>.log (truncated unless appending, as on an API server restart).
func (e *Environment) logOutput(name string, appendLog bool) (io.WriteCloser, error) {
	if e.out != nil {
		return &prefixWriter{prefix: name + ": ", mu: &e.outMu, out: e.out}, nil
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	return f, nil
}
