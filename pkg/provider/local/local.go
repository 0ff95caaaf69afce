// Package local is a provider.Provider whose instances are cmd/forward-proxy
// processes listening on a loopback address of the operator's machine: for
// development, `make run` and tests. Each instance is a detached process (its
// own session, stdin from /dev/null, output into a log file) that outlives
// the operator, plus a state file in a directory, so that a restarted
// operator finds its instances again instead of starting them twice.
//
// It is not for production: instances live and die with the operator's
// machine, they share its egress IP, and one state directory belongs to one
// operator at a time (concurrent calls within one Provider are safe; two
// Providers over one directory in two processes are not coordinated). It
// needs Linux: /proc tells its processes from others that reuse their pids.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// LoopbackCIDR is admitted by every local instance (--allow-cidr).
const LoopbackCIDR = "127.0.0.0/8"

// BinaryName is the file name of cmd/forward-proxy, looked up next to the
// running executable and then in $PATH.
const BinaryName = "forward-proxy"

// Defaults of Options.
const (
	DefaultHost = "127.0.0.1"
	// DefaultStartTimeout bounds how long Create waits for the process to log
	// its port; forward-proxy takes milliseconds.
	DefaultStartTimeout = 10 * time.Second
	// DefaultStopTimeout is how long Delete waits after SIGTERM before SIGKILL.
	DefaultStopTimeout = 5 * time.Second
)

// The environment variables cmd/forward-proxy reads its credentials from.
const (
	envUsername  = "PROXY_USERNAME"
	envPassword  = "PROXY_PASSWORD"
	envLeaseKeys = "PROXY_LEASE_KEYS"
)

const (
	// shutdownTimeout is the process's own drain on SIGTERM (its
	// --shutdown-timeout), shorter than DefaultStopTimeout so that a
	// graceful stop normally finishes before Delete resorts to SIGKILL.
	shutdownTimeout = 3 * time.Second
	// healthzTimeout bounds the /healthz request that tells Running from
	// Provisioning.
	healthzTimeout = time.Second
	// killWait bounds the wait for a process to vanish after SIGKILL.
	killWait = 2 * time.Second
	// pollInterval is how often the log file and /proc are polled.
	pollInterval = 10 * time.Millisecond
)

// Messages of Instance.Message.
const (
	MessageRunning  = "running"
	MessageStarting = "starting"
	MessageExited   = "process exited"
)

// Options configure New.
type Options struct {
	// StateDir holds one state file, log file and (optional) user-data file
	// per instance. Required; created with mode 0700 when missing (an
	// existing directory keeps its mode; the files are 0600).
	StateDir string
	// Binary is the path of cmd/forward-proxy. Default: BinaryName next to
	// the running executable, else in $PATH.
	Binary string
	// Secrets reads the Secret named by a Proxy's spec.auth (the operator
	// passes a lister-backed function). Needed only for Proxies with auth.
	Secrets provider.SecretReader
	// Host is the loopback address instances listen on. Default DefaultHost.
	Host string
	// StartTimeout and StopTimeout default to DefaultStartTimeout and
	// DefaultStopTimeout.
	StartTimeout time.Duration
	StopTimeout  time.Duration
	// LoopbackExits gives each instance an exit address of its own in
	// 127.1.0.0/16 (forward-proxy --source-addr, from the instance's
	// name), so that sites on this machine see as many IPs as instances
	// and ban them one by one, as sites do a cloud fleet's.
	LoopbackExits bool
}

// Provider runs instances as local processes. Create with New.
type Provider struct {
	dir          string
	binary       string
	secrets      provider.SecretReader
	host         string
	startTimeout time.Duration
	stopTimeout  time.Duration
	bootID       string
	healthz      *http.Client
	// loopbackExits: Options.LoopbackExits.
	loopbackExits bool

	// locks serialises the calls on one instance id, so that a Get never
	// rewrites a state file that a Delete is removing.
	locksMu sync.Mutex
	locks   map[string]*sync.Mutex
}

var _ provider.Provider = (*Provider)(nil)

// New checks the options, creates the state directory and finds the binary.
// Every error is provider.Permanent: retrying cannot create a missing binary.
func New(opts Options) (*Provider, error) {
	if opts.StateDir == "" {
		return nil, provider.Permanent(errors.New("local provider: the state directory is not set"))
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, provider.Permanent(fmt.Errorf("local provider: state directory: %w", err))
	}
	if err := ensureWritableDir(dir); err != nil {
		return nil, provider.Permanent(fmt.Errorf("local provider: %w", err))
	}
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, provider.Permanent(fmt.Errorf("local provider: %w", err))
	}
	bootID, err := readBootID()
	if err != nil {
		return nil, provider.Permanent(fmt.Errorf("local provider: %w", err))
	}
	host := opts.Host
	if host == "" {
		host = DefaultHost
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, provider.Permanent(fmt.Errorf("local provider: host %q is not a loopback IP address", host))
	}
	p := &Provider{
		dir:           dir,
		binary:        bin,
		secrets:       opts.Secrets,
		host:          host,
		loopbackExits: opts.LoopbackExits,
		startTimeout:  orDefault(opts.StartTimeout, DefaultStartTimeout),
		stopTimeout:   orDefault(opts.StopTimeout, DefaultStopTimeout),
		bootID:        bootID,
		// Proxy: nil, so $HTTP_PROXY never reroutes a loopback health check.
		healthz: &http.Client{
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
			Timeout:   healthzTimeout,
		},
		locks: map[string]*sync.Mutex{},
	}
	return p, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ensureWritableDir creates dir (0700) and proves it writable with a probe file.
func ensureWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// findBinary resolves Options.Binary or the default.
func findBinary(configured string) (string, error) {
	if configured != "" {
		if err := executable(configured); err != nil {
			return "", fmt.Errorf("%s binary %s: %w (run `make build`)", BinaryName, configured, err)
		}
		return filepath.Abs(configured)
	}
	var beside string
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), BinaryName)
		if executable(beside) == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(BinaryName); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("%s binary not found next to the operator (%s) nor in $PATH: run `make build`, or pass its path", BinaryName, beside)
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// validID matches the instance names provider.InstanceName makes, and keeps
// ids safe as file names.
var validID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (p *Provider) lock(id string) func() {
	p.locksMu.Lock()
	m, ok := p.locks[id]
	if !ok {
		m = &sync.Mutex{}
		p.locks[id] = m
	}
	p.locksMu.Unlock()
	m.Lock()
	return m.Unlock
}

// Create implements provider.Provider: it starts forward-proxy on
// Host:<free port> and returns once the process logged its port (Running once
// it answers /healthz). An existing instance of that name is returned as it
// is, even Stopped: the controller deletes and recreates stopped instances.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if !validID.MatchString(req.Name) {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("local provider: invalid instance name %q", req.Name))
	}
	unlock := p.lock(req.Name)
	defer unlock()

	st, err := p.readState(req.Name)
	switch {
	case err == nil:
		return p.observe(ctx, st)
	case !errors.Is(err, fs.ErrNotExist):
		return provider.Instance{}, err
	}
	env, err := p.credentialsEnv(ctx, req.Proxy)
	if err != nil {
		return provider.Instance{}, err
	}
	st, err = p.start(ctx, req, env)
	if err != nil {
		return provider.Instance{}, err
	}
	klog.FromContext(ctx).V(2).Info("Started local instance", "instance", st.ID, "pid", st.PID, "addr", net.JoinHostPort(st.Host, strconv.Itoa(int(st.Port))))
	return p.observe(ctx, st)
}

// credentialsEnv returns the child's whole environment: the credentials of
// the Proxy's Secret, if any, with its lease keys when it holds some, and
// nothing else (the operator's environment may hold its own secrets).
// Errors name the Secret, never its content.
func (p *Provider) credentialsEnv(ctx context.Context, proxy *crawlv1alpha1.Proxy) ([]string, error) {
	env := []string{} // not nil: nil would make the child inherit ours
	if proxy == nil {
		return env, nil
	}
	creds, err := provider.ReadCredentials(ctx, "local", proxy, p.secrets)
	switch {
	case err != nil:
		return nil, err
	case creds == nil:
		return env, nil
	}
	env = append(env, envUsername+"="+creds.Username, envPassword+"="+creds.Password)
	if creds.LeaseKeys != "" {
		env = append(env, envLeaseKeys+"="+creds.LeaseKeys)
	}
	return env, nil
}

// Get implements provider.Provider: provider.ErrNotFound without a state
// file; Stopped when the recorded process is gone (or its pid now belongs
// to another process); Running once it answers /healthz.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	if !validID.MatchString(id) {
		return provider.Instance{}, fmt.Errorf("local provider: get %q: %w", id, provider.ErrNotFound)
	}
	unlock := p.lock(id)
	defer unlock()
	st, err := p.readState(id)
	if errors.Is(err, fs.ErrNotExist) {
		return provider.Instance{}, fmt.Errorf("local provider: get %s: %w", id, provider.ErrNotFound)
	}
	if err != nil {
		return provider.Instance{}, err
	}
	return p.observe(ctx, st)
}

// observe turns a state file into an Instance. Runs under the id's lock.
func (p *Provider) observe(ctx context.Context, st state) (provider.Instance, error) {
	inst := provider.Instance{ID: st.ID, Tags: cloneTags(st.Tags), SpecHash: st.SpecHash, ExitRanges: slices.Clone(st.ExitRanges)}
	alive, err := p.ours(st)
	if err != nil {
		return provider.Instance{}, err
	}
	if !alive {
		inst.State, inst.Message = provider.StateStopped, MessageExited
		return inst, nil
	}
	if st.Port == 0 {
		// The operator stopped between starting the process and reading its
		// port: the log still has it.
		port, ok := p.listeningPort(st.ID)
		if !ok {
			inst.State, inst.Message = provider.StateProvisioning, MessageStarting
			return inst, nil
		}
		st.Port = port
		if err := p.writeState(st); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot record the port of a local instance", "instance", st.ID)
		}
	}
	if err := p.checkHealthz(ctx, st); err != nil {
		inst.State, inst.Message = provider.StateProvisioning, "not answering /healthz yet: "+err.Error()
		return inst, nil
	}
	inst.State, inst.Message = provider.StateRunning, MessageRunning
	inst.IP, inst.Port = st.Host, st.Port
	return inst, nil
}

// Delete implements provider.Provider: SIGTERM, up to StopTimeout for a
// graceful exit, SIGKILL, then the files go (the state file last, so that a
// crash midway leaves the instance tracked). A missing instance is not an
// error. Unlike a cloud, the process is gone when Delete returns.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !validID.MatchString(id) {
		return nil // no such file can exist
	}
	unlock := p.lock(id)
	defer unlock()
	st, err := p.readState(id)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Nothing runs; tidy what a failed start may have left.
	case errors.Is(err, errCorruptState):
		// Written atomically, so only a hand edit corrupts it; without a pid
		// there is nothing to stop, and keeping the file would block the
		// Proxy's deletion forever.
		klog.FromContext(ctx).Info("Removing an unreadable state file; its process, if any, is not stopped", "instance", id, "err", err)
	case err != nil:
		return err
	default:
		if err := p.stop(ctx, st); err != nil {
			return err
		}
	}
	p.removeFiles(id)
	return nil
}

// ListByTag implements provider.Provider by scanning the state directory;
// the result is sorted by ID.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	entries, err := os.ReadDir(p.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: listing %s: %w", p.dir, err)
	}
	var out []provider.Instance
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), stateSuffix)
		if !ok || !validID.MatchString(id) || !e.Type().IsRegular() {
			continue // temporary files start with a dot
		}
		inst, found, err := p.listOne(ctx, id, key, value)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, inst)
		}
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (p *Provider) listOne(ctx context.Context, id, key, value string) (provider.Instance, bool, error) {
	unlock := p.lock(id)
	defer unlock()
	st, err := p.readState(id)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return provider.Instance{}, false, nil // deleted since ReadDir
	case errors.Is(err, errCorruptState):
		// No readable tags, so it cannot match; Delete tidies it.
		klog.FromContext(ctx).V(2).Info("Skipping an unreadable state file", "instance", id, "err", err)
		return provider.Instance{}, false, nil
	case err != nil:
		return provider.Instance{}, false, err
	}
	if v, ok := st.Tags[key]; !ok || v != value {
		return provider.Instance{}, false, nil
	}
	inst, err := p.observe(ctx, st)
	return inst, err == nil, err
}

func cloneTags(tags map[string]string) map[string]string {
	if tags == nil {
		return nil
	}
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		out[k] = v
	}
	return out
}

// classifyFileError makes errors the operator cannot fix by retrying
// (permissions, a read-only file system) permanent, and the rest transient.
func classifyFileError(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOTDIR) {
		return provider.Permanent(err)
	}
	return provider.Transient(err)
}
