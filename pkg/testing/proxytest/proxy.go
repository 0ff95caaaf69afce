package proxytest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/textlogger"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// Options configure a proxy started by one of the Start functions. Fields
// that an implementation cannot honour are ignored by it, as documented.
type Options struct {
	// Username and Password require basic authentication when set.
	Username, Password string

	// ConnectPorts restricts CONNECT to these target ports (tinyproxy only:
	// its ConnectPort lines). Empty allows every port.
	ConnectPorts []int

	// MaxClients is tinyproxy's MaxClients: connections it serves at once.
	// Default 100.
	MaxClients int

	// Verbosity is klog's -v for forward-proxy (in-process and binary).
	// Default 4.
	Verbosity int

	// DefaultEgress starts forward-proxy (in-process or binary) with its
	// default egress guard, which refuses loopback, instead of admitting
	// Loopback. Tests of the guard use it.
	DefaultEgress bool

	// Configure adjusts the forwardproxy.Config of an in-process proxy.
	Configure func(*forwardproxy.Config)

	// ListenIP is the loopback address an in-process proxy listens on, such
	// as a fake cloud's instance IP. Default 127.0.0.1.
	ListenIP string

	// Args are extra flags for the binary (later flags override earlier
	// ones, so they may override the defaults used here).
	Args []string
	// Env are extra KEY=value environment entries for the binary.
	Env []string
	// Netns, when set, runs the binary in that network namespace (`ip
	// netns exec`); its 127.0.0.1 is then the namespace's own, so clients
	// dial it from inside (netnstest.Namespace.Do).
	Netns string
}

// Proxy is a running proxy under test.
type Proxy struct {
	// Impl names the implementation ("inprocess", "binary", "tinyproxy").
	Impl string
	// Addr is the proxy's 127.0.0.1:port.
	Addr string
	// Server is the in-process server (nil for processes).
	Server *forwardproxy.Server

	logs *syncBuffer
	proc *process
	// logFile, when set, is the proxy's log (squid's access log).
	logFile string
}

// URL returns http://Addr without credentials.
func (p *Proxy) URL() *url.URL { return &url.URL{Scheme: "http", Host: p.Addr} }

// URLWithAuth returns http://user:pass@Addr.
func (p *Proxy) URLWithAuth(user, pass string) *url.URL {
	u := p.URL()
	u.User = url.UserPassword(user, pass)
	return u
}

// Logs returns what the proxy logged so far (processes: their combined
// output).
func (p *Proxy) Logs() string {
	if p.logFile != "" {
		b, _ := os.ReadFile(p.logFile)
		return string(b)
	}
	if p.proc != nil {
		return p.proc.output.String()
	}
	return p.logs.String()
}

// Terminate sends SIGTERM to a process proxy and waits for it to exit
// (killing it after a while). It returns the exit error, nil for status 0.
func (p *Proxy) Terminate(t testing.TB) error {
	t.Helper()
	if p.proc == nil {
		t.Fatalf("proxytest: Terminate: %s is not a process", p.Impl)
	}
	return p.proc.stop(t)
}

// Wait waits up to timeout for a process proxy to exit by itself and
// returns its exit error (nil for status 0); it fails the test on timeout.
func (p *Proxy) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	if p.proc == nil {
		t.Fatalf("proxytest: Wait: %s is not a process", p.Impl)
	}
	select {
	case <-p.proc.exited:
		return p.proc.err
	case <-time.After(timeout):
		t.Fatalf("proxytest: %s still running after %v", p.Impl, timeout)
		return nil
	}
}

// Signal sends sig to a process proxy.
func (p *Proxy) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if p.proc == nil {
		t.Fatalf("proxytest: Signal: %s is not a process", p.Impl)
	}
	if err := p.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("proxytest: signalling %s: %v", p.Impl, err)
	}
}

// WaitForLog polls the proxy's logs until they contain substr.
func (p *Proxy) WaitForLog(t testing.TB, substr string, timeout time.Duration) {
	t.Helper()
	if p.proc != nil {
		if err := p.proc.waitFor(timeout, fmt.Sprintf("log line %q", substr), func() bool {
			return strings.Contains(p.proc.output.String(), substr)
		}); err != nil {
			t.Fatalf("proxytest: %v", err)
		}
		return
	}
	if err := Poll(timeout, func() bool { return strings.Contains(p.logs.String(), substr) }); err != nil {
		t.Fatalf("proxytest: waiting for log line %q: %v", substr, err)
	}
}

// Impl is a way to start a proxy.
type Impl struct {
	Name  string
	Start func(testing.TB, Options) *Proxy
}

// Impls lists every implementation the shared client tests run against:
// forward-proxy in-process and as a binary, and tinyproxy.
func Impls() []Impl {
	return []Impl{
		{"inprocess", StartInProcess},
		{"binary", StartBinary},
		{"tinyproxy", StartTinyproxy},
	}
}

func (o Options) verbosity() int {
	if o.Verbosity == 0 {
		return 4
	}
	return o.Verbosity
}

// Loopback is 127.0.0.0/8, which every proxy these helpers start admits
// explicitly (forward-proxy's egress guard refuses it by default): tests
// send traffic to 127.0.0.0/8 only.
var Loopback = netip.MustParsePrefix("127.0.0.0/8")

// StartInProcess runs a forwardproxy.Server on 127.0.0.1 in this process,
// logging into a buffer (see Proxy.Logs), shut down on cleanup. It admits
// Loopback (AllowCIDRs) unless opts.Configure changes that.
func StartInProcess(t testing.TB, opts Options) *Proxy {
	t.Helper()
	logs := &syncBuffer{}
	cfg := forwardproxy.Config{
		Name:       forwardproxy.DefaultName,
		Username:   opts.Username,
		Password:   opts.Password,
		AllowCIDRs: []netip.Prefix{Loopback},
		Logger: textlogger.NewLogger(textlogger.NewConfig(
			textlogger.Verbosity(opts.verbosity()), textlogger.Output(logs))),
	}
	if opts.DefaultEgress {
		cfg.AllowCIDRs = nil
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	srv, err := forwardproxy.New(cfg)
	if err != nil {
		t.Fatalf("proxytest: forwardproxy.New: %v", err)
	}
	l := listenLoopback(t, opts.ListenIP)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	p := &Proxy{Impl: "inprocess", Addr: l.Addr().String(), Server: srv, logs: logs}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("proxytest: in-process proxy shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("proxytest: in-process proxy Serve: %v", err)
		}
		if t.Failed() {
			t.Logf("logs of the in-process proxy:\n%s", logs.String())
		}
	})
	return p
}

// StartBinary runs the cmd/forward-proxy binary (built once per test
// binary, see Main) with --listen=127.0.0.1:0 and finds its port in the
// "listening" log line. Credentials go through the environment, as in
// production. It admits Loopback (--allow-cidr=127.0.0.0/8, unless
// opts.DefaultEgress; opts.Args may add ranges). It is stopped with SIGTERM on cleanup.
func StartBinary(t testing.TB, opts Options) *Proxy {
	t.Helper()
	bin := ForwardProxyBinary(t)
	args := []string{bin,
		"--listen=127.0.0.1:0",
		"--shutdown-timeout=5s",
		"-v=" + strconv.Itoa(opts.verbosity()),
	}
	if !opts.DefaultEgress {
		args = append(args, "--allow-cidr="+Loopback.String())
	}
	args = append(args, opts.Args...)
	if opts.Netns != "" {
		args = append([]string{"ip", "netns", "exec", opts.Netns}, args...)
	}
	var creds []string
	if opts.Username != "" || opts.Password != "" {
		creds = []string{"PROXY_USERNAME=" + opts.Username, "PROXY_PASSWORD=" + opts.Password}
	}
	env := environ([]string{"PROXY_USERNAME", "PROXY_PASSWORD"}, append(creds, opts.Env...)...)

	var addr atomic.Pointer[string]
	proc := startProcess(t, "forward-proxy", args, env, func(line string) {
		if a, ok := forwardproxy.ParseListeningLine(line); ok {
			addr.CompareAndSwap(nil, &a)
		}
	})
	if err := proc.waitFor(startTimeout, `"listening" log line`, func() bool { return addr.Load() != nil }); err != nil {
		t.Fatalf("proxytest: %v; output:\n%s", err, proc.output.String())
	}
	return &Proxy{Impl: "binary", Addr: *addr.Load(), proc: proc}
}

var (
	mainRunning atomic.Bool
	build       struct {
		once sync.Once
		dir  string
		path string
		err  error
	}
)

// Main runs the tests of a package that uses StartBinary and removes the
// binary built for them afterwards:
//
//	func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }
func Main(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// NeedsForwardProxyBinary is what a test that runs cmd/forward-proxy as a
// process needs (integration.Needs); ForwardProxyBinary and StartBinary say
// it themselves.
const NeedsForwardProxyBinary = "cmd/forward-proxy built by `go build` and run as a process"

// NeedsSquid is what a test that runs squid needs (integration.Needs); the
// Start functions that run it say it themselves.
const NeedsSquid = "squid from Debian (`make deps`)"

// ForwardProxyBinary returns the path of cmd/forward-proxy, built on first
// use into a temporary directory that Main removes. Under -short it skips t
// (integration.Needs): the unit loop builds and starts no binary.
func ForwardProxyBinary(t testing.TB) string {
	t.Helper()
	integration.Needs(t, NeedsForwardProxyBinary)
	if !mainRunning.Load() {
		t.Fatal("proxytest: building cmd/forward-proxy needs this package's tests to run through proxytest.Main: " +
			"add func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }")
	}
	build.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			build.err = fmt.Errorf("the go command is not in $PATH: %w", err)
			return
		}
		build.dir, build.err = os.MkdirTemp("", "proxytest-bin-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "forward-proxy")
		cmd := exec.Command(goTool, "build", "-o", build.path, "github.com/proxyfleet/proxy-operator/cmd/forward-proxy")
		cmd.Env = environ([]string{"CGO_ENABLED"}, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/forward-proxy: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatalf("proxytest: %v", build.err)
	}
	return build.path
}

// tinyproxyToken is what tinyproxy's config parser accepts unquoted.
var tinyproxyToken = regexp.MustCompile(`^[A-Za-z0-9._~!$&*+=@%-]+$`)

// tinyproxyDirs are searched after $PATH.
var tinyproxyDirs = []string{"/usr/bin", "/usr/sbin"}

func tinyproxyBinary() (string, error) {
	p, err := findBinary("tinyproxy", tinyproxyDirs...)
	if err != nil {
		return "", fmt.Errorf("tinyproxy is not installed (not in $PATH nor in %s): "+
			"run `make deps` (apt-get installs tinyproxy, squid and redis-server)", strings.Join(tinyproxyDirs, ", "))
	}
	return p, nil
}

// StartTinyproxy runs Debian's tinyproxy in the foreground on a free
// 127.0.0.1 port with a config file in a temporary directory: only
// 127.0.0.1 allowed, BasicAuth when credentials are given, ConnectPort lines
// from opts.ConnectPorts, logging to its stdout (no syslog, no log file). A
// missing tinyproxy fails the test and names `make deps`.
func StartTinyproxy(t testing.TB, opts Options) *Proxy {
	t.Helper()
	integration.Needs(t, "tinyproxy from Debian (`make deps`)")
	bin, err := tinyproxyBinary()
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	auth := opts.Username != "" || opts.Password != ""
	if auth && (!tinyproxyToken.MatchString(opts.Username) || !tinyproxyToken.MatchString(opts.Password)) {
		t.Fatal("proxytest: tinyproxy credentials must be simple tokens (letters, digits, ._~!$&*+=@%-)")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "tinyproxy.conf")

	// Picking a free port and handing it over is racy; when another process
	// grabs it first, tinyproxy exits and we try again with another port.
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		port := Port(t, freeAddr(t))
		var b strings.Builder
		fmt.Fprintf(&b, "Port %d\nListen 127.0.0.1\nTimeout 30\nMaxClients %d\n", port, cmp.Or(opts.MaxClients, 100))
		fmt.Fprintf(&b, "Allow 127.0.0.1\nSyslog Off\nLogLevel Info\nPidFile %q\n", filepath.Join(dir, "tinyproxy.pid"))
		fmt.Fprintf(&b, "ViaProxyName \"tinyproxy\"\nDisableViaHeader No\n")
		for _, cp := range opts.ConnectPorts {
			fmt.Fprintf(&b, "ConnectPort %d\n", cp)
		}
		if auth {
			fmt.Fprintf(&b, "BasicAuth %s %s\n", opts.Username, opts.Password)
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
			t.Fatalf("proxytest: %v", err)
		}
		name := fmt.Sprintf("tinyproxy (attempt %d)", attempt)
		proc := startProcess(t, name, []string{bin, "-d", "-c", conf}, environ(nil), nil)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		lastErr = proc.waitFor(startTimeout, "listening socket", func() bool {
			return strings.Contains(proc.output.String(), "Accepting connections") && canDial(addr)
		})
		if lastErr == nil {
			return &Proxy{Impl: "tinyproxy", Addr: addr, proc: proc}
		}
		_ = proc.stop(t)
		t.Logf("proxytest: %v; output:\n%s", lastErr, proc.output.String())
	}
	t.Fatalf("proxytest: tinyproxy did not start: %v", lastErr)
	return nil
}

func canDial(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Poll calls cond every few milliseconds until it returns true or timeout
// passes (eventually.Poll).
func Poll(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return eventually.Poll(ctx, 5*time.Millisecond, eventually.Holds(func() (bool, string) {
		return cond(), fmt.Sprintf("condition not met after %v", timeout)
	}))
}

// LeaveFrom makes an in-process proxy dial targets from ip (a loopback
// address such as 127.0.4.1), so that a target sees each proxy as its own
// exit IP: an Options.Configure.
func LeaveFrom(ip string) func(*forwardproxy.Config) {
	return func(cfg *forwardproxy.Config) {
		cfg.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext
	}
}
