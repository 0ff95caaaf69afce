package gce_test

// The cloud-init in docs/gce.md is run here with Debian's squid (the package
// the cloud-init installs), so the page cannot drift into a configuration
// that does not start or does not authenticate.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const docsPath = "../../../docs/gce.md"

// cloudConfig is the part of a cloud-config the test reads.
type cloudConfig struct {
	Packages   []string `json:"packages"`
	WriteFiles []struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"write_files"`
	RunCmd []string `json:"runcmd"`
}

// documentedExample is the manifest of docs/gce.md §2, split into its objects.
type documentedExample struct {
	userData    cloudConfig
	credentials *corev1.Secret
	proxy       *crawlv1alpha1.Proxy
}

func readDocumentedExample(t *testing.T) documentedExample {
	t.Helper()
	page, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1)
	var manifest []byte
	for _, b := range blocks {
		if bytes.Contains(b[1], []byte("#cloud-config")) {
			manifest = b[1]
		}
	}
	if manifest == nil {
		t.Fatalf("%s has no yaml block with a cloud-config", docsPath)
	}
	var ex documentedExample
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("manifest document: %v\n%s", err, doc)
		}
		switch meta.Kind {
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			if ud, ok := s.StringData["user-data"]; ok {
				if !strings.HasPrefix(ud, "#cloud-config\n") {
					t.Errorf("the user-data does not start with #cloud-config")
				}
				if err := yaml.Unmarshal([]byte(ud), &ex.userData); err != nil {
					t.Fatalf("user-data: %v", err)
				}
			} else {
				ex.credentials = &s
			}
		case "Proxy":
			ex.proxy = &crawlv1alpha1.Proxy{}
			if err := yaml.UnmarshalStrict([]byte(doc), ex.proxy); err != nil {
				t.Fatalf("Proxy: %v", err)
			}
		}
	}
	if ex.credentials == nil || ex.proxy == nil {
		t.Fatal("the example lacks the credentials Secret or the Proxy")
	}
	return ex
}

func TestDocumentedSquidCloudInit(t *testing.T) {
	t.Parallel()
	ex := readDocumentedExample(t)

	var squidConf string
	for _, f := range ex.userData.WriteFiles {
		if f.Path == "/etc/squid/squid.conf" {
			squidConf = f.Content
		}
	}
	var user, password string
	passwordLine := regexp.MustCompile(`printf '([^:]+):%s\\n' "\$\(openssl passwd -apr1 '([^']+)'\)" > /etc/squid/passwords`)
	for _, cmd := range ex.userData.RunCmd {
		if m := passwordLine.FindStringSubmatch(cmd); m != nil {
			user, password = m[1], m[2]
		}
	}
	switch {
	case squidConf == "":
		t.Fatal("the cloud-init writes no /etc/squid/squid.conf")
	case user == "":
		t.Fatalf("no runcmd writes /etc/squid/passwords the way this test expects: %q", ex.userData.RunCmd)
	case ex.credentials.StringData["username"] != user || ex.credentials.StringData["password"] != password:
		t.Errorf("spec.auth's Secret says %s/%s, the cloud-init %s/%s", ex.credentials.StringData["username"],
			ex.credentials.StringData["password"], user, password)
	}
	if port := ex.proxy.Spec.GCE.Port; !strings.Contains(squidConf, fmt.Sprintf("http_port %d\n", port)) {
		t.Errorf("squid's http_port is not spec.gce.port %d", port)
	}

	// The documented squid refuses loopback too; the test's targets live
	// there, so loopback alone is admitted here, as every test proxy does.
	const loopbackACL = " 127.0.0.0/8"
	if !regexp.MustCompile(`(?m)^acl internal dst .*` + regexp.QuoteMeta(loopbackACL) + `( |$)`).MatchString(squidConf) {
		t.Fatalf("the documented squid.conf does not refuse 127.0.0.0/8 in its internal ACL")
	}
	for _, want := range []string{"http_access deny metadata_name\n", "http_access deny internal\n", "169.254.0.0/16", "10.0.0.0/8", "fc00::/7"} {
		if !strings.Contains(squidConf, want) {
			t.Errorf("the documented squid.conf lacks %q", want)
		}
	}
	squidConf = strings.Replace(squidConf, loopbackACL, "", 1)

	proxyAddr := startSquid(t, squidConf, user, password)
	target := proxytest.StartHTTPTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t) // not on 443: CONNECT must be refused
	withAuth := &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(user, password)}
	tests := map[string]struct {
		proxy       *url.URL
		target      string
		wantStatus  int
		wantConnect int
	}{
		"authenticated":             {proxy: withAuth, target: target.URL + "/generate_204", wantStatus: http.StatusNoContent},
		"no credentials":            {proxy: &url.URL{Scheme: "http", Host: proxyAddr}, target: target.URL + "/generate_204", wantStatus: http.StatusProxyAuthRequired},
		"wrong password":            {proxy: &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(user, "wrong")}, target: target.URL + "/generate_204", wantStatus: http.StatusProxyAuthRequired},
		"CONNECT to a port but 443": {proxy: withAuth, target: httpsTarget.URL + "/generate_204", wantConnect: http.StatusForbidden},
		// Refused by squid before it connects; startSquid's safety net makes
		// a broken rule a 503, never a connection beyond loopback.
		"metadata server":            {proxy: withAuth, target: "http://169.254.169.254/computeMetadata/v1/", wantStatus: http.StatusForbidden},
		"metadata server by name":    {proxy: withAuth, target: "http://metadata.google.internal/computeMetadata/v1/", wantStatus: http.StatusForbidden},
		"CONNECT to metadata server": {proxy: withAuth, target: "https://169.254.169.254/", wantConnect: http.StatusForbidden},
		"private range":              {proxy: withAuth, target: "http://10.0.0.1/", wantStatus: http.StatusForbidden},
		"CGNAT":                      {proxy: withAuth, target: "http://100.64.0.1/", wantStatus: http.StatusForbidden},
		"IPv6 loopback":              {proxy: withAuth, target: "http://[::1]:80/", wantStatus: http.StatusForbidden},
		"unique local IPv6":          {proxy: withAuth, target: "https://[fd00::1]/", wantConnect: http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := proxytest.Fetch(ctx, tc.proxy, tc.target, proxytest.RootCAs(httpsTarget))
			if tc.wantConnect != 0 {
				if res.ConnectStatus != tc.wantConnect {
					t.Errorf("CONNECT status %d (%v), want %d", res.ConnectStatus, err, tc.wantConnect)
				}
				return
			}
			if err != nil || res.Status != tc.wantStatus {
				t.Errorf("status %d (%v), want %d", res.Status, err, tc.wantStatus)
			}
		})
	}
}

// startSquid runs squid in the foreground with the documented squid.conf,
// made to listen on loopback and to keep its files in a temporary directory.
func startSquid(t *testing.T, conf, user, password string) string {
	t.Helper()
	bin, err := exec.LookPath("squid")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/squid"); statErr != nil {
			t.Fatal("squid is not installed: run `make deps` (apt-get installs tinyproxy, squid and redis-server)")
		}
		bin = "/usr/sbin/squid"
	}
	dir, err := os.MkdirTemp("", "gce-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// squid started as root runs as the "proxy" user: it must read the
	// files and write its log.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	hash, err := exec.Command("openssl", "passwd", "-apr1", password).Output()
	if err != nil {
		t.Fatalf("openssl passwd (the cloud-init's own way to hash the password): %v", err)
	}
	passwords := filepath.Join(dir, "passwords")
	if err := os.WriteFile(passwords, []byte(user+":"+strings.TrimSpace(string(hash))+"\n"), 0o644); err != nil {
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
	if err := proxytest.Poll(20*time.Second, func() bool {
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
