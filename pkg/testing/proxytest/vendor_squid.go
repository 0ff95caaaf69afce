package proxytest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

//go:embed testdata/vendor-auth-helper.py
var vendorAuthHelper []byte

// vendorExitBase begins the loopback addresses a vendor's sessions leave
// from: 127.0.9.1, 127.0.9.2, ...
const vendorExitBase = "127.0.9."

// vendorPython runs the auth helper: squid runs it as the "proxy" user,
// who cannot run a python3 found in root's $PATH (pyenv shims in /root).
const vendorPython = "/usr/bin/python3"

// VendorOptions configure StartVendorSquid.
type VendorOptions struct {
	// UsernamePattern is a regular expression (Python re syntax, matched
	// with fullmatch) with exactly one capturing group: the session id.
	// Usernames that do not match are refused with 407.
	UsernamePattern string
	// Password is the only password accepted.
	Password string
	// ExitIPs is how many loopback exit addresses sessions are spread over
	// (default 8): 127.0.9.1 .. 127.0.9.N.
	ExitIPs int
}

// Vendor is squid acting as a proxy network's super proxy: the exit IP is
// chosen by the session id in the Basic-auth username (auth helper in
// testdata/vendor-auth-helper.py; each session leaves from its own
// loopback address through tcp_outgoing_address).
type Vendor struct {
	// Addr is the super proxy's host:port on 127.0.0.1.
	Addr string
	dir  string
	ips  []string
}

// StartVendorSquid runs the super proxy until the test ends. A missing
// squid or python3 fails the test and names `make deps`.
func StartVendorSquid(t testing.TB, opts VendorOptions) *Vendor {
	t.Helper()
	integration.Needs(t, "squid and python3 from Debian (`make deps`)")
	bin, err := findBinary("squid", squidDirs...)
	if err != nil {
		t.Fatalf("proxytest: squid is not installed (not in $PATH nor in %s): run `make deps` (apt-get installs tinyproxy, squid and redis-server)", strings.Join(squidDirs, ", "))
	}
	if st, err := os.Stat(vendorPython); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("proxytest: %s (runs the vendor squid's auth helper) is not installed: run `make deps` (apt-get installs python3 with python3-requests)", vendorPython)
	}
	if opts.ExitIPs == 0 {
		opts.ExitIPs = 8
	}
	if opts.ExitIPs < 1 || opts.ExitIPs > 254 {
		t.Fatalf("proxytest: VendorOptions.ExitIPs %d: want 1..254 (127.0.9.N)", opts.ExitIPs)
	}
	if strings.ContainsAny(opts.UsernamePattern+opts.Password, "\r\n") {
		t.Fatalf("proxytest: VendorOptions: the username pattern and password must be one line each")
	}
	dir, err := os.MkdirTemp("", "proxytest-vendor-")
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// squid started as root runs as the "proxy" user, and so does its
	// helper: they read their files and write state and logs here.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	helper := filepath.Join(dir, "vendor-auth-helper.py")
	if err := os.WriteFile(helper, vendorAuthHelper, 0o755); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	// The helper's settings go in a file: squid would read parentheses in
	// its command line as a configuration macro, and the password stays
	// out of ps.
	settings := strings.Join([]string{opts.UsernamePattern, opts.Password, strconv.Itoa(opts.ExitIPs), vendorExitBase}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(settings), 0o644); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	// A bad pattern fails here with Python's word for it, not as squid's
	// "helpers are crashing too rapidly" later.
	if out, err := exec.Command(vendorPython, helper, dir, "--check").CombinedOutput(); err != nil {
		t.Fatalf("proxytest: VendorOptions.UsernamePattern %q: %v\n%s", opts.UsernamePattern, err, out)
	}

	v := &Vendor{dir: dir}
	var slots strings.Builder
	for n := 1; n <= opts.ExitIPs; n++ {
		ip := vendorExitBase + strconv.Itoa(n)
		v.ips = append(v.ips, ip)
		// The helper's "OK exit=ipN" becomes a transaction note.
		fmt.Fprintf(&slots, "acl ip%d note exit ip%d\ntcp_outgoing_address %s ip%d\n", n, n, ip, n)
	}
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		// Another process may take the free port before squid binds it.
		v.Addr = freeAddr(t)
		conf := fmt.Sprintf(`http_port %s
auth_param basic program %s %s %s
auth_param basic children 1 startup=1 idle=1
auth_param basic realm vendor
auth_param basic credentialsttl 1 second
acl localnet src 127.0.0.0/8
acl authenticated proxy_auth REQUIRED
http_access deny !localnet
http_access deny !authenticated
http_access allow authenticated
http_access deny all
%sacl test_loopback dst 127.0.0.0/8
never_direct allow !test_loopback
cache deny all
via on
forwarded_for delete
pid_filename %s
cache_log %s
access_log stdio:%s
logfile_rotate 0
coredump_dir %s
shutdown_lifetime 0 seconds
pinger_enable off
`, v.Addr, vendorPython, helper, dir, slots.String(), filepath.Join(dir, "squid.pid"), filepath.Join(dir, "cache.log"), filepath.Join(dir, "access.log"), dir)
		confPath := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatalf("proxytest: %v", err)
		}
		// One helper (children 1) keeps the assignment; it exits when squid
		// closes its stdin, so stopping squid (also on failure) ends both.
		proc := startProcess(t, fmt.Sprintf("vendor squid (attempt %d)", attempt), []string{bin, "-N", "-f", confPath}, environ(nil), nil)
		lastErr = proc.waitFor(startTimeout, "listening socket", func() bool { return canDial(v.Addr) })
		if lastErr == nil {
			return v
		}
		_ = proc.stop(t)
		cacheLog, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		t.Logf("proxytest: %v; output:\n%s\ncache.log:\n%s", lastErr, proc.output.String(), cacheLog)
	}
	t.Fatalf("proxytest: the vendor squid did not start: %v", lastErr)
	return nil
}

// ExitIPs lists the exit addresses.
func (v *Vendor) ExitIPs() []string { return slices.Clone(v.ips) }

// Force makes session leave from exitIP from now on (a test forcing two
// sessions onto one IP). Takes effect within about a second: squid asks
// the helper again after credentialsttl.
func (v *Vendor) Force(t testing.TB, session, exitIP string) {
	t.Helper()
	if !slices.Contains(v.ips, exitIP) || session == "" || strings.ContainsAny(session, " \t\r\n") {
		t.Fatalf("proxytest: Force(%q, %q): want a session id without spaces and one of %v", session, exitIP, v.ips)
	}
	f, err := os.OpenFile(filepath.Join(v.dir, "force"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	defer f.Close()
	// One write of one line: the helper, reading at every request, never
	// sees half of it.
	if _, err := f.WriteString(session + " " + exitIP + "\n"); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
}

// Sessions returns session id -> exit IP as the helper has assigned them
// so far (a forced IP once the helper has answered with it).
func (v *Vendor) Sessions(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	data, err := os.ReadFile(filepath.Join(v.dir, "sessions"))
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if session, ip, ok := strings.Cut(line, " "); ok {
			out[session] = ip
		}
	}
	return out
}

// Authentications counts the helper's answers so far: ok (OK, credentials
// accepted) and refused (ERR, which squid turns into 407). squid re-asks
// only after credentialsttl, so ok counts logins, not requests.
func (v *Vendor) Authentications(t testing.TB) (ok, refused int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(v.dir, "counts"))
	if os.IsNotExist(err) {
		return 0, 0
	}
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	if _, err := fmt.Sscan(string(data), &ok, &refused); err != nil {
		t.Fatalf("proxytest: the vendor helper's counts %q: %v", data, err)
	}
	return ok, refused
}
