package proxytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// squidDirs are searched after $PATH.
var squidDirs = []string{"/usr/sbin", "/usr/bin"}

// squidAuthHelper is Debian's basic_ncsa_auth, which reads an htpasswd file.
const squidAuthHelper = "/usr/lib/squid/basic_ncsa_auth"

// StartSquid runs Debian's squid in the foreground (-N) on a free 127.0.0.1
// port with a config file in a temporary directory: only loopback clients,
// CONNECT to any port (test targets do not listen on 443), no cache, basic
// auth from an htpasswd file (openssl passwd -apr1) when credentials are
// given. Logs returns its access log (one line per request or tunnel). A
// missing squid fails the test and names `make deps`.
func StartSquid(t testing.TB, opts Options) *Proxy {
	t.Helper()
	integration.Needs(t, NeedsSquid)
	bin, err := findBinary("squid", squidDirs...)
	if err != nil {
		t.Fatalf("proxytest: squid is not installed (not in $PATH nor in %s): run `make deps` (apt-get installs tinyproxy, squid and redis-server)", strings.Join(squidDirs, ", "))
	}
	dir, err := os.MkdirTemp("", "proxytest-squid-")
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// squid started as root runs as the "proxy" user: it must read its
	// files and write its logs there.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	var authConf string
	if opts.Username != "" || opts.Password != "" {
		hash, err := exec.Command("openssl", "passwd", "-apr1", opts.Password).Output()
		if err != nil {
			t.Fatalf("proxytest: openssl passwd -apr1 (hashing squid's password): %v", err)
		}
		passwords := filepath.Join(dir, "passwords")
		if err := os.WriteFile(passwords, []byte(opts.Username+":"+strings.TrimSpace(string(hash))+"\n"), 0o644); err != nil {
			t.Fatalf("proxytest: %v", err)
		}
		authConf = fmt.Sprintf("auth_param basic program %s %s\nauth_param basic realm proxytest\nacl authenticated proxy_auth REQUIRED\nhttp_access deny !authenticated\n",
			squidAuthHelper, passwords)
	}
	accessLog := filepath.Join(dir, "access.log")
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		addr := freeAddr(t)
		conf := fmt.Sprintf(`http_port %s
acl localnet src 127.0.0.0/8
http_access deny !localnet
%shttp_access allow localnet
http_access deny all
cache deny all
via on
forwarded_for delete
pid_filename %s
cache_log %s
access_log stdio:%s
logfile_rotate 0
strip_query_terms off
coredump_dir %s
shutdown_lifetime 0 seconds
`, addr, authConf, filepath.Join(dir, "squid.pid"), filepath.Join(dir, "cache.log"), accessLog, dir)
		confPath := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatalf("proxytest: %v", err)
		}
		proc := startProcess(t, fmt.Sprintf("squid (attempt %d)", attempt), []string{bin, "-N", "-f", confPath}, environ(nil), nil)
		lastErr = proc.waitFor(startTimeout, "listening socket", func() bool { return canDial(addr) })
		if lastErr == nil {
			return &Proxy{Impl: "squid", Addr: addr, proc: proc, logFile: accessLog}
		}
		_ = proc.stop(t)
		cacheLog, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		t.Logf("proxytest: %v; output:\n%s\ncache.log:\n%s", lastErr, proc.output.String(), cacheLog)
	}
	t.Fatalf("proxytest: squid did not start: %v", lastErr)
	return nil
}
