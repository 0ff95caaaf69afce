// Package testenv starts a real etcd and kube-apiserver on loopback ports, built from
// source into bin/ by hack/tools/build.sh (`make testenv`), and applies the project's
// CRDs to it. Integration tests share one per package through Shared, started on first use; `make run` uses it with a kept
// Dir so that data survives restarts.
//
// It is not a cluster: there is no kubelet, scheduler or controller-manager. Pods stay
// Pending unless a test writes their status, namespaces are never finalized, the
// ServiceAccount admission plugin is off and ServiceAccount tokens come only from the
// TokenRequest API (see ServiceAccountToken).
package testenv

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// modulePath identifies the repository root when walking up from the working dir.
const modulePath = "github.com/proxyfleet/proxy-operator"

// Start and RestartAPIServer give up after these, even if ctx allows longer. They are
// generous because a 2-core machine may start several test packages at once.
const (
	etcdStartTimeout      = time.Minute
	apiserverStartTimeout = 2 * time.Minute
	crdTimeout            = time.Minute
)

// Options configures Start. The zero value is what tests want.
type Options struct {
	// BinDir holds kube-apiserver, etcd and kubectl. Default: <repo root>/bin, where
	// the repo root is the nearest parent of the working dir whose go.mod is the
	// module github.com/proxyfleet/proxy-operator.
	BinDir string
	// CRDDir holds the CRDs to apply: every *.yaml in it, each may hold several
	// documents separated by ---. Default: <repo root>/artifacts/crd (no CRDs if it
	// does not exist; a CRDDir that is set must exist).
	CRDDir string
	// Dir holds certificates, etcd data and logs. Default: a new temporary dir that
	// Stop removes. A Dir that is set is kept and reused by the next Start: etcd
	// data persists and the certificates and keys in it are reused.
	Dir string
	// Out receives the etcd and kube-apiserver logs, each line prefixed with the
	// component's name. Default: Dir/etcd.log and Dir/kube-apiserver.log.
	Out io.Writer
}

// Environment is a running etcd and kube-apiserver. Its methods may be called from
// several goroutines, except RestartAPIServer and Stop, which must not overlap any
// other call.
type Environment struct {
	// Config authenticates as an administrator (CN=admin, O=system:masters) with a
	// client certificate, and pins the environment's CA.
	Config *rest.Config
	// Dir holds certificates, etcd data and logs (absolute).
	Dir string

	binDir  string
	keepDir bool
	out     io.Writer  // nil: log files in Dir
	outMu   sync.Mutex // serializes lines from both children on out

	ports     func(n int) ([]int, error) // freePorts; tests make it return taken ones
	pki       *pki
	etcdURL   string
	etcdPeer  string
	apiPort   int
	etcd      *process
	apiserver *process
	// startedAPIServer: later starts append to the API server's log.
	startedAPIServer bool
	crds             []appliedCRD
	stopped          bool
}

// Start starts etcd and kube-apiserver, waits until the API server is ready, applies
// the CRDs from opts.CRDDir and waits until they are served. On error nothing is
// left running.
func Start(ctx context.Context, opts Options) (_ *Environment, err error) {
	logger := klog.FromContext(ctx)
	binDir, crdDir, crdDirRequired, err := resolveDirs(opts)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		path := filepath.Join(binDir, name)
		if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s not found: run `make testenv`", path)
		} else if statErr != nil {
			return nil, fmt.Errorf("testenv binary: %w", statErr)
		}
	}
	crdDocs, err := readCRDs(crdDir, crdDirRequired)
	if err != nil {
		return nil, err
	}

	e := &Environment{binDir: binDir, out: opts.Out, ports: freePorts}
	if opts.Dir != "" {
		e.Dir, err = filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("testenv dir: %w", err)
		}
		if err := os.MkdirAll(e.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("testenv dir: %w", err)
		}
		e.keepDir = true
	} else {
		e.Dir, err = os.MkdirTemp("", "testenv-")
		if err != nil {
			return nil, fmt.Errorf("testenv dir: %w", err)
		}
	}
	defer func() {
		if err != nil {
			if stopErr := e.Stop(); stopErr != nil {
				logger.Error(stopErr, "Stopping a testenv that failed to start")
			}
		}
	}()

	refuseUnderShort()
	if e.pki, err = ensurePKI(filepath.Join(e.Dir, "pki")); err != nil {
		return nil, err
	}
	if err := e.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := e.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if e.crds, err = applyCRDs(ctx, e.Config, crdDocs); err != nil {
		return nil, err
	}
	logger.V(1).Info("testenv started", "host", e.Config.Host, "etcd", e.etcdURL, "dir", e.Dir, "crds", len(e.crds))
	return e, nil
}

// Stop ends kube-apiserver, then etcd: SIGTERM to each process group, SIGKILL after
// a few seconds. It removes Dir if Start created it. It is safe to call twice.
func (e *Environment) Stop() error {
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	// The API server first, so it does not log a storm of etcd errors.
	for _, p := range []*process{e.apiserver, e.etcd} {
		if p != nil {
			errs = append(errs, p.stop())
		}
	}
	if !e.keepDir && e.Dir != "" {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing testenv dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// KubectlPath is the kubectl built with the API server; use it with WriteKubeconfig.
func (e *Environment) KubectlPath() string {
	return filepath.Join(e.binDir, "kubectl")
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port and
// etcd, then waits until it is ready and the CRDs are served again. Clients made
// from Config keep working after it returns.
func (e *Environment) RestartAPIServer(ctx context.Context) error {
	if e.apiserver == nil || e.stopped {
		return errors.New("restart kube-apiserver: environment is not running")
	}
	if err := e.apiserver.stop(); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	e.apiserver = nil
	if err := e.runAPIServer(ctx); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	if err := waitCRDsServed(ctx, e.Config, e.crds); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	klog.FromContext(ctx).V(1).Info("kube-apiserver restarted", "host", e.Config.Host)
	return nil
}

// resolveDirs fills in the default bin and CRD dirs; crdDirRequired is false when
// the CRD dir is the default, which may be absent.
func resolveDirs(opts Options) (binDir, crdDir string, crdDirRequired bool, err error) {
	binDir, crdDir, crdDirRequired = opts.BinDir, opts.CRDDir, opts.CRDDir != ""
	if binDir == "" || crdDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", "", false, fmt.Errorf("finding the repo root: %w", err)
		}
		root, err := findRepoRoot(wd)
		if err != nil {
			return "", "", false, err
		}
		if binDir == "" {
			binDir = filepath.Join(root, "bin")
		}
		if crdDir == "" {
			crdDir = filepath.Join(root, "artifacts", "crd")
		}
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return "", "", false, fmt.Errorf("bin dir: %w", err)
	}
	if crdDir, err = filepath.Abs(crdDir); err != nil {
		return "", "", false, fmt.Errorf("CRD dir: %w", err)
	}
	return binDir, crdDir, crdDirRequired, nil
}

// findRepoRoot walks up from dir to the go.mod of this module; nested modules such
// as hack/tools are passed over.
func findRepoRoot(dir string) (string, error) {
	for d := dir; ; {
		mod, err := moduleOf(filepath.Join(d, "go.mod"))
		if err == nil && mod == modulePath {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s above %s: set Options.BinDir and Options.CRDDir", modulePath, dir)
		}
		d = parent
	}
}

// moduleOf returns the module path declared in a go.mod file.
func moduleOf(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", goMod)
}

// freePorts returns n distinct ports on 127.0.0.1 that were free a moment ago. They
// may be taken before the child binds them; callers retry once on a clash.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// poll calls check every interval until it returns true or an error, ctx ends or
// timeout passes; lastErr (if any) explains a timeout.
func poll(ctx context.Context, timeout time.Duration, check func(ctx context.Context) (done bool, lastErr error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	const interval = 100 * time.Millisecond
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr error
	for {
		done, err := check(ctx)
		if done {
			return err
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// refuseUnderShort panics when a test binary run with -short is about to
// start etcd: the unit loop (`go test -short ./...`) promises to start no
// process, and a test that would has forgotten integration.Needs(t,
// testenv.Needs), which Shared.Get calls. A panic fails the whole package,
// loudly, where a skip or an error might pass unseen. Before the flags are
// parsed (a TestMain's helper mode) -short is unknown, and nothing is refused.
func refuseUnderShort() {
	if testing.Testing() && flag.Parsed() && testing.Short() {
		panic("testenv: Start under go test -short, which starts no kube-apiserver or etcd: " +
			"the test must call integration.Needs(t, testenv.Needs) first (Shared.Get does)")
	}
}
