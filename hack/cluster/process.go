package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// start runs c detached from this process (its own session, output to its log,
// pid in its pid file): the node outlives `make cluster`, and down finds it.
func start(n node, c component) error {
	for path, content := range c.Files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	for _, dir := range []string{filepath.Dir(n.logFile(c.Name)), filepath.Dir(n.pidFile(c.Name))} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("%s: %w (make cluster builds it; see docs/operations.md)", c.Name, err)
	}
	log, err := os.OpenFile(n.logFile(c.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(c.Bin, c.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", c.Name, err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Process.Release(); err != nil {
		return err
	}
	return os.WriteFile(n.pidFile(c.Name), []byte(strconv.Itoa(pid)), 0o600)
}

// running returns the pid of c if the process in its pid file is alive and is
// still c's binary (a pid can be reused after a reboot).
func running(n node, name, bin string) (int, bool) {
	b, err := os.ReadFile(n.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != resolved(bin) {
		return 0, false
	}
	return pid, true
}

// resolved is bin as /proc/<pid>/exe names it: with its symlinks followed. A
// worktree's bin/ is often a link to another checkout's; compared unresolved,
// every component looked exited the moment it started, and down left it
// running.
func resolved(bin string) string {
	if p, err := filepath.EvalSymlinks(bin); err == nil {
		return p
	}
	return bin
}

// strays returns the processes running one of bins (resolved) whose command
// line names dir: the node's own, found without their pid files (lost to a
// crash or to an earlier down). Other processes of the same binaries (the
// test environments' etcd and kube-apiserver) never name the node's folder.
func strays(dir string, bins []string) []int {
	want := map[string]bool{}
	for _, b := range bins {
		want[resolved(b)] = true
	}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !want[strings.TrimSuffix(exe, " (deleted)")] {
			continue
		}
		cmdline, err := os.ReadFile(p)
		if err == nil && namesDir(cmdline, dir) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// namesDir: one of the NUL-separated arguments is dir or a path under it,
// alone or as a flag's value (--data-dir=dir/etcd). Pure.
func namesDir(cmdline []byte, dir string) bool {
	dir = filepath.Clean(dir)
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if _, v, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(arg, "-") {
			arg = v
		}
		if arg == dir || strings.HasPrefix(arg, dir+"/") {
			return true
		}
	}
	return false
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the process to go.
func stop(n node, name, bin string, grace time.Duration) error {
	pid, ok := running(n, name, bin)
	if !ok {
		return os.RemoveAll(n.pidFile(name))
	}
	if err := signalAndWait(pid, grace); err != nil {
		return fmt.Errorf("stopping %s (pid %d): %w", name, pid, err)
	}
	return os.RemoveAll(n.pidFile(name))
}

func signalAndWait(pid int, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !waitGone(pid, 5*time.Second) {
				return errors.New("still running after SIGKILL")
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// alive: the process exists and is not a zombie (our detached children are
// reaped by init, but a zombie left to us must not count as running).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func waitGone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return false
}

// tail returns the last lines of a component's log, for error messages.
func tail(n node, name string, lines int) string {
	b, err := os.ReadFile(n.logFile(name))
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
