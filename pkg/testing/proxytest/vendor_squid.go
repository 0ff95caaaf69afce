package proxytest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

//go:embed testdata/vendor-auth-helper.py
var vendorAuthHelper []byte

// vendorExitBase begins the loopback addresses a vendor's sessions leave
// from: 127.0.9.1, 127.0.9.2, ...
const vendorExitBase = "127.0.9."

// VendorOptions configure StartVendorSquid.
type VendorOptions struct {
	// UsernamePattern is a Python regular expression, matched in full,
	// with one group: the session id. Other usernames get 407.
	UsernamePattern string
	// Password is the only password accepted.
	Password string
	// ExitIPs is how many loopback exit addresses the sessions are spread
	// over (default 8).
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
	bin, err := findBinary("squid", squidDirs...)
	if err != nil {
		t.Fatalf("proxytest: squid is not installed: run `make deps`")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("proxytest: python3 (squid's auth helper here) is not installed: run `make deps`")
	}
	if opts.ExitIPs == 0 {
		opts.ExitIPs = 8
	}
	dir, err := os.MkdirTemp("", "proxytest-vendor-")
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// squid and its helper run as the "proxy" user: they read and write here.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	helper := filepath.Join(dir, "vendor-auth-helper.py")
	if err := os.WriteFile(helper, vendorAuthHelper, 0o755); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	// The helper's settings go in a file: squid would read parentheses in
	// its command line as a configuration macro.
	settings := strings.Join([]string{opts.UsernamePattern, opts.Password, strconv.Itoa(opts.ExitIPs), vendorExitBase}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(settings), 0o644); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	v := &Vendor{dir: dir}
	var slots strings.Builder
	for i := 1; i <= opts.ExitIPs; i++ {
		ip := vendorExitBase + strconv.Itoa(i)
		v.ips = append(v.ips, ip)
		fmt.Fprintf(&slots, "acl ip%d note exit ip%d\ntcp_outgoing_address %s ip%d\n", i-1, i-1, ip, i-1)
	}
	v.Addr = freeAddr(t)
	conf := fmt.Sprintf(`http_port %s
auth_param basic program /usr/bin/python3 %s %s
auth_param basic children 1 startup=1 idle=1
auth_param basic realm vendor
auth_param basic credentialsttl 1 second
acl localnet src 127.0.0.0/8
acl authenticated proxy_auth REQUIRED
http_access deny !localnet
http_access deny !authenticated
%shttp_access allow authenticated
http_access deny all
acl test_loopback dst 127.0.0.0/8
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
`, v.Addr, helper, dir, slots.String(), filepath.Join(dir, "squid.pid"), filepath.Join(dir, "cache.log"), filepath.Join(dir, "access.log"), dir)
	confPath := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	proc := startProcess(t, "vendor squid", []string{bin, "-N", "-f", confPath}, environ(nil), nil)
	if err := proc.waitFor(startTimeout, "listening socket", func() bool { return canDial(v.Addr) }); err != nil {
		cacheLog, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		t.Fatalf("proxytest: the vendor squid did not start: %v\n%s\ncache.log:\n%s", err, proc.output.String(), cacheLog)
	}
	return v
}

// ExitIPs lists the addresses sessions leave from.
func (v *Vendor) ExitIPs() []string { return v.ips }

// Force makes session leave from exitIP from now on (within about a
// second: squid asks the helper again after credentialsttl).
func (v *Vendor) Force(t testing.TB, session, exitIP string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(v.dir, "force"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s\n", session, exitIP); err != nil {
		t.Fatal(err)
	}
}

// Sessions returns session id → exit IP as the helper assigned them (a
// forced IP not included).
func (v *Vendor) Sessions(t testing.TB) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(v.dir, "sessions"))
	if os.IsNotExist(err) {
		return map[string]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if session, ip, ok := strings.Cut(line, " "); ok {
			out[session] = ip
		}
	}
	return out
}
