package proxytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// StartDocumentedSquid runs squid in the foreground with a squid.conf a
// page documents, made to listen on 127.0.0.31, to read passwordsFile (for
// /etc/squid/passwords), to keep its files in a temporary directory and
// never to connect beyond loopback (anything else is a 503), and returns
// its address: the docs tests run what the pages tell users to install.
func StartDocumentedSquid(t testing.TB, conf, passwordsFile string) string {
	t.Helper()
	integration.Needs(t, NeedsSquid)
	bin, err := findBinary("squid", squidDirs...)
	if err != nil {
		t.Fatalf("proxytest: squid is not installed (not in $PATH nor in %s): run `make deps` (apt-get installs tinyproxy, squid and redis-server)", strings.Join(squidDirs, ", "))
	}
	dir, err := os.MkdirTemp("", "documented-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// squid started as root runs as the "proxy" user: it must read the
	// files and write its log.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// squid (as the "proxy" user) reads it from the temporary directory.
	passwordsContent, err := os.ReadFile(passwordsFile)
	if err != nil {
		t.Fatal(err)
	}
	passwords := filepath.Join(dir, "passwords")
	if err := os.WriteFile(passwords, passwordsContent, 0o644); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.31:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	local := regexp.MustCompile(`(?m)^http_port \d+$`).ReplaceAllString(conf, "http_port 127.0.0.31:"+port)
	local = strings.ReplaceAll(local, "/etc/squid/passwords", passwords)
	// Safety net: squid never connects beyond loopback from this test (with
	// no peers, anything else is a 503), even if a documented rule broke.
	local += "acl test_loopback dst 127.0.0.0/8\nnever_direct allow !test_loopback\n"
	local += fmt.Sprintf("pid_filename %s\ncache_log %s\naccess_log none\ncoredump_dir %s\nshutdown_lifetime 0 seconds\n",
		filepath.Join(dir, "squid.pid"), filepath.Join(dir, "cache.log"), dir)
	confPath := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(confPath, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	cmd := exec.Command(bin, "-N", "-f", confPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			t.Logf("squid output:\n%s\ncache.log:\n%s", out.String(), log)
		}
	})
	if err := Poll(20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}); err != nil {
		t.Fatalf("squid does not listen on %s: %v", addr, err)
	}
	return addr
}
