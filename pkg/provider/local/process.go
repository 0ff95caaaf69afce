package local

// The forward-proxy processes themselves: starting one detached and
// tracking it, its health, and stopping it.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// start runs the process and records it. The state file is written as soon
// as the pid is known, before the wait for the port, so that a crash of the
// operator in between leaves a tracked instance (Get learns the port from
// the log) rather than an untracked process.
func (p *Provider) start(ctx context.Context, req provider.CreateRequest, env []string) (st state, err error) {
	id := req.Name
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return state{}, classifyFileError(fmt.Errorf("local provider: creating the state directory: %w", err))
	}
	defer func() {
		if err != nil && !errors.Is(err, errStillStarting) {
			p.removeFiles(id)
		}
	}()
	args, err := p.processArgs(req)
	if err != nil {
		return state{}, err
	}
	cmd, err := p.spawn(id, args, env)
	if err != nil {
		return state{}, err
	}
	return p.track(ctx, req, cmd)
}

// processArgs are forward-proxy's flags for req, with its cloud-init
// written to the file the process reads.
func (p *Provider) processArgs(req provider.CreateRequest) ([]string, error) {
	args := []string{
		"--listen=" + net.JoinHostPort(p.host, "0"),
		"--shutdown-timeout=" + shutdownTimeout.String(),
		// Local instances serve development on this machine, whose targets
		// (make run's, the tests') live on loopback: admitted explicitly,
		// since forward-proxy's egress guard refuses it by default.
		"--allow-cidr=" + LoopbackCIDR,
	}
	args = append(args, provider.EgressArgs(req.Proxy)...)
	ranges, err := checkExitRanges(req.Proxy)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		args = append(args, "--exit-range="+r)
	}
	// Exit ranges pick the source address per session; a fixed one would
	// contradict them (forward-proxy refuses both).
	if p.loopbackExits && len(ranges) == 0 {
		args = append(args, "--source-addr="+LoopbackExit(req.Name).String())
	}
	if req.CloudInit != nil {
		path := p.userDataPath(req.Name)
		if err := writeFileAtomic(path, func(f *os.File) error { _, err := f.Write(req.CloudInit); return err }); err != nil {
			return nil, classifyFileError(fmt.Errorf("local provider: writing %s: %w", path, err))
		}
		args = append(args, "--cloud-init="+path)
	}
	return args, nil
}

// spawn starts the detached process with its output in its log file.
func (p *Provider) spawn(id string, args, env []string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(p.logPath(id), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, classifyFileError(fmt.Errorf("local provider: opening the log file: %w", err))
	}
	if err := logFile.Chmod(0o600); err != nil { // O_CREATE keeps the mode of an existing file
		logFile.Close()
		return nil, classifyFileError(fmt.Errorf("local provider: log file: %w", err))
	}
	cmd := exec.Command(p.binary, args...)
	cmd.Dir = p.dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	// An *os.File is handed to the child as is: no copying goroutine in the
	// operator, so the output keeps flowing after the operator exits.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logFile.Close()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, provider.Permanent(fmt.Errorf("local provider: starting %s: %w (run `make build`)", p.binary, err))
		}
		return nil, provider.Transient(fmt.Errorf("local provider: starting %s: %w", p.binary, err))
	}
	return cmd, nil
}

// track records the started process in its state file, waits for its port
// and records that too; it kills the process when it cannot track it.
func (p *Provider) track(ctx context.Context, req provider.CreateRequest, cmd *exec.Cmd) (state, error) {
	id, pid := req.Name, cmd.Process.Pid
	// Before the child can be reaped: until then its /proc entry stays, even
	// if it has already exited.
	startTime, _, statErr := readProcStat(pid)
	// Reap the child when it exits while we live, so that its pid does not
	// linger as a zombie; after our exit, init does.
	go func() { _ = cmd.Wait() }()
	if statErr != nil {
		_ = cmd.Process.Kill()
		return state{}, provider.Transient(fmt.Errorf("local provider: reading /proc/%d/stat of the new process: %w", pid, statErr))
	}
	st := state{
		ID:               id,
		PID:              pid,
		Host:             p.host,
		Tags:             req.Tags,
		SpecHash:         req.SpecHash,
		ExitRanges:       exitRanges(req.Proxy),
		ProcessStartTime: startTime,
		BootID:           p.bootID,
	}
	if err := p.writeState(st); err != nil {
		_ = cmd.Process.Kill()
		return state{}, classifyFileError(fmt.Errorf("local provider: %w", err))
	}
	port, err := p.waitListening(ctx, st)
	if err != nil {
		if ctx.Err() != nil {
			// The process is tracked: the next Create returns it and Get
			// finds its port. Not our failure to clean up.
			return state{}, fmt.Errorf("local provider: waiting for %s to listen: %w: %w", id, errStillStarting, ctx.Err())
		}
		_ = cmd.Process.Kill()
		return state{}, provider.Transient(fmt.Errorf("local provider: %s: %w", id, err))
	}
	st.Port = port
	if err := p.writeState(st); err != nil {
		_ = cmd.Process.Kill()
		return state{}, classifyFileError(fmt.Errorf("local provider: %w", err))
	}
	return st, nil
}

// errStillStarting marks a Create cut short by its context: the process
// runs on and is tracked.
var errStillStarting = errors.New("still starting")

// waitListening polls the log file for the "listening" line until the
// deadline, the context's end, or the process's exit.
func (p *Provider) waitListening(ctx context.Context, st state) (int32, error) {
	deadline := time.NewTimer(p.startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if port, ok := p.listeningPort(st.ID); ok {
			return port, nil
		}
		alive, err := p.ours(st)
		if err != nil {
			return 0, err
		}
		if !alive {
			// One more look: it may have logged and then died.
			if port, ok := p.listeningPort(st.ID); ok {
				return port, nil
			}
			return 0, fmt.Errorf("forward-proxy exited before listening; last log line: %s", p.lastLogLine(st.ID))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("forward-proxy logged no %q line within %v; last log line: %s",
				"listening", p.startTimeout, p.lastLogLine(st.ID))
		case <-tick.C:
		}
	}
}

func (p *Provider) checkHealthz(ctx context.Context, st state) error {
	url := "http://" + net.JoinHostPort(st.Host, strconv.Itoa(int(st.Port))) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.healthz.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// stop ends the recorded process if it is still ours.
func (p *Provider) stop(ctx context.Context, st state) error {
	// On Linux FindProcess holds a pidfd from here on, and the identity
	// check comes after it: the signals below reach the process we checked
	// even if the pid is reused meanwhile.
	proc, err := os.FindProcess(st.PID)
	if err != nil {
		return nil // Unix: never
	}
	defer proc.Release()
	alive, err := p.ours(st)
	if err != nil || !alive {
		return err
	}
	logger := klog.FromContext(ctx)
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return provider.Transient(fmt.Errorf("local provider: stopping %s (pid %d): %w", st.ID, st.PID, err))
	}
	if p.waitGone(ctx, st, p.stopTimeout) {
		return nil
	}
	logger.Info("Local instance ignored SIGTERM; killing it", "instance", st.ID, "pid", st.PID, "waited", p.stopTimeout)
	if err := proc.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return provider.Transient(fmt.Errorf("local provider: killing %s (pid %d): %w", st.ID, st.PID, err))
	}
	if p.waitGone(context.WithoutCancel(ctx), st, killWait) {
		return nil
	}
	return provider.Transient(fmt.Errorf("local provider: %s (pid %d) still runs after SIGKILL", st.ID, st.PID))
}

// waitGone polls until the process is no longer ours (exited, or a zombie),
// timeout passes or ctx ends; it reports whether it is gone.
func (p *Provider) waitGone(ctx context.Context, st state, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if alive, err := p.ours(st); err == nil && !alive {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// LoopbackExit is the exit address of the instance named name when
// Options.LoopbackExits is set: 127.1.x.y from a hash of the name (y never
// 0 or 255). Two of a few dozen instances share one rarely; a test that
// needs distinct exits checks them.
func LoopbackExit(name string) netip.Addr {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return netip.AddrFrom4([4]byte{127, 1, byte(v >> 8), byte(1 + v%254)})
}

// exitRanges are spec.local.exitRanges as strings; nil without any.
func exitRanges(p *crawlv1alpha1.Proxy) []string {
	if p == nil || p.Spec.Local == nil {
		return nil
	}
	var out []string
	for _, r := range p.Spec.Local.ExitRanges {
		out = append(out, string(r))
	}
	return out
}

// checkExitRanges returns spec.local.exitRanges, each a valid prefix in its
// canonical form, or a permanent error naming the item: the CRD checks the
// same, this guards objects from before it and callers that skip it.
func checkExitRanges(p *crawlv1alpha1.Proxy) ([]string, error) {
	ranges := exitRanges(p)
	for i, r := range ranges {
		if _, err := netip.ParsePrefix(r); err != nil {
			return nil, provider.Permanent(fmt.Errorf("local provider: spec.local.exitRanges[%d] %q is not a CIDR range such as fd00:1::/64", i, r))
		}
	}
	return ranges, nil
}
