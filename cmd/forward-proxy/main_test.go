package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }

const waitTimeout = 10 * time.Second

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "alice:pa:ss\n")
	crlf := write("crlf", "alice:pw\r\n")
	noColon := write("nocolon", "alice\n")
	emptyPass := write("emptypass", "alice:\n")
	twoLines := write("twolines", "alice:pw\nbob:pw\n")

	type result struct {
		User, Pass string
		Err        bool
	}
	tests := map[string]struct {
		file string
		env  map[string]string
		want result
	}{
		"none: no auth":          {want: result{}},
		"env":                    {env: map[string]string{envUsername: "bob", envPassword: "pw"}, want: result{"bob", "pw", false}},
		"env username only":      {env: map[string]string{envUsername: "bob"}, want: result{Err: true}},
		"env password only":      {env: map[string]string{envPassword: "pw"}, want: result{Err: true}},
		"file, colon in pass":    {file: good, want: result{"alice", "pa:ss", false}},
		"file with CRLF":         {file: crlf, want: result{"alice", "pw", false}},
		"file without colon":     {file: noColon, want: result{Err: true}},
		"file with empty pass":   {file: emptyPass, want: result{Err: true}},
		"file with two lines":    {file: twoLines, want: result{Err: true}},
		"file missing":           {file: filepath.Join(dir, "absent"), want: result{Err: true}},
		"file and env conflict":  {file: good, env: map[string]string{envUsername: "bob", envPassword: "pw"}, want: result{Err: true}},
		"file and partial env 2": {file: good, env: map[string]string{envPassword: "pw"}, want: result{Err: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			user, pass, err := credentials(tc.file, func(k string) string { return tc.env[k] })
			if diff := cmp.Diff(tc.want, result{user, pass, err != nil}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err != nil && (strings.Contains(err.Error(), "pa:ss") || strings.Contains(err.Error(), ":pw")) {
				t.Errorf("error reveals a password: %v", err)
			}
		})
	}
}

func TestAuthFile(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(authFile, []byte("filer:f1le-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proxytest.StartBinary(t, proxytest.Options{Args: []string{"--auth-file=" + authFile}})
	ctx := context.Background()

	res, err := proxytest.Fetch(ctx, p.URL(), target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusProxyAuthRequired {
		t.Errorf("without credentials: %d %v, want 407", res.Status, err)
	}
	res, err = proxytest.Fetch(ctx, p.URLWithAuth("filer", "f1le-pass"), target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusNoContent {
		t.Errorf("with the file's credentials: %d %v, want 204", res.Status, err)
	}
}

func TestLogsNeitherCredentialsNorCloudInit(t *testing.T) {
	const (
		user      = "envuser-k3"
		pass      = "envpass-m8"
		cloudInit = "#cloud-config\nwrite_files:\n- path: /etc/marker\n  content: cloud-init-content-z5\n"
	)
	target := proxytest.StartHTTPTarget(t)
	tlsTarget := proxytest.StartHTTPSTarget(t)
	ciPath := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(ciPath, []byte(cloudInit), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proxytest.StartBinary(t, proxytest.Options{
		Username: user, Password: pass, Verbosity: 10,
		Args: []string{"--cloud-init=" + ciPath},
	})
	ctx := context.Background()
	for _, proxyURL := range []*url.URL{p.URLWithAuth(user, pass), p.URLWithAuth(user, "x"+pass), p.URL()} {
		for _, target := range []string{target.URL + "/echo", tlsTarget.URL + "/generate_204"} {
			_, _ = proxytest.Fetch(ctx, proxyURL, target, proxytest.RootCAs(tlsTarget))
		}
	}
	if err := p.Terminate(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}

	logs := p.Logs()
	sum := sha256.Sum256([]byte(cloudInit))
	for _, want := range []string{
		"cloud-init user-data present",
		"bytes=" + strconv.Itoa(len(cloudInit)),
		`sha256="` + hex.EncodeToString(sum[:]) + `"`,
		"auth=true",
		"Refusing request", "Tunnel closed", "Forwarded",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	for _, secret := range []string{user, pass, "cloud-init-content-z5", "write_files"} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q:\n%s", secret, logs)
		}
	}
}

func TestGracefulShutdown(t *testing.T) {
	echo := startEcho(t)
	p := proxytest.StartBinary(t, proxytest.Options{Args: []string{"--shutdown-timeout=1m"}})

	c, err := net.DialTimeout("tcp", p.Addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}

	p.Signal(t, syscall.SIGTERM)
	p.WaitForLog(t, `"Shutting down"`, waitTimeout)
	if err := proxytest.Poll(waitTimeout, func() bool {
		nc, err := net.Dial("tcp", p.Addr)
		if err == nil {
			nc.Close()
		}
		return err != nil
	}); err != nil {
		t.Fatalf("still accepting connections after SIGTERM: %v", err)
	}

	// The open tunnel keeps working until the client is done with it.
	msg := "still here"
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
		t.Fatalf("tunnel during shutdown: %q %v", buf, err)
	}
	c.Close()

	if err := p.Wait(t, waitTimeout); err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
	if logs := p.Logs(); !strings.Contains(logs, `"Shutdown complete"`) {
		t.Errorf("logs lack \"Shutdown complete\":\n%s", logs)
	}
}

func TestStartupErrors(t *testing.T) {
	bin := proxytest.ForwardProxyBinary(t)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(authFile, []byte("u:p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		Code    int
		Message bool
	}
	tests := map[string]struct {
		args    []string
		env     []string
		message string
		want    result
	}{
		"username without password": {env: []string{envUsername + "=u"}, message: "set both", want: result{2, true}},
		"env and auth file":         {args: []string{"--auth-file=" + authFile}, env: []string{envUsername + "=u", envPassword + "=p"}, message: "use one", want: result{2, true}},
		"missing cloud-init":        {args: []string{"--cloud-init=" + filepath.Join(t.TempDir(), "absent")}, message: "Cannot read cloud-init user-data", want: result{1, true}},
		"stray argument":            {args: []string{"extra"}, message: "Unexpected arguments", want: result{2, true}},
		"bad name":                  {args: []string{"--name=two words"}, message: "single token", want: result{2, true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"--listen=127.0.0.1:0"}, tc.args...)...)
			cmd.Env = append(envWithout(envUsername, envPassword), tc.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			got := result{code, strings.Contains(string(out), tc.message)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\noutput:\n%s", diff, out)
			}
		})
	}
}

func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// startEcho starts a TCP echo server on 127.0.0.1 and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func TestLeaseKeys(t *testing.T) {
	dir := t.TempDir()
	key, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", key+"\n")
	empty := write("empty", "\n")
	bad := write("bad", "not-a-key\n")
	for name, tc := range map[string]struct {
		file    string
		env     string
		want    int
		wantErr bool
	}{
		"none":           {},
		"env":            {env: key + "\n" + key, want: 2},
		"file":           {file: good, want: 1},
		"file and env":   {file: good, env: key, wantErr: true},
		"an empty file":  {file: empty, wantErr: true},
		"a bad key":      {file: bad, wantErr: true},
		"a missing file": {file: filepath.Join(dir, "absent"), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			keys, err := leaseKeys(tc.file, func(k string) string {
				if k == envLeaseKeys {
					return tc.env
				}
				return ""
			})
			if (err != nil) != tc.wantErr || len(keys) != tc.want {
				t.Fatalf("leaseKeys = %d keys, %v; want %d, error %v", len(keys), err, tc.want, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), key[:10]) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

// TestLeaseKeyFile: the binary with --lease-key-file admits a lease's
// credential until its end and not after a push of its end, and says so
// in its log without the key.
func TestLeaseKeyFile(t *testing.T) {
	target := proxytest.StartHTTPTarget(t)
	text, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := leasecred.ParseKeys(text)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "lease-key")
	if err := os.WriteFile(keyFile, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proxytest.StartBinary(t, proxytest.Options{Username: "inst", Password: "static-pw", Args: []string{"--lease-key-file=" + keyFile}})
	ctx := context.Background()
	ref := leasecred.Ref{Epoch: 1, Serial: 9}
	pass := leasecred.Sign(keys[0], "inst", leasecred.Claims{Ref: ref, End: time.Now().Add(time.Hour)})
	res, err := proxytest.Fetch(ctx, p.URLWithAuth("inst", pass), target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusNoContent {
		t.Fatalf("with the lease's credential: %d %v, want 204", res.Status, err)
	}
	body, auth := leasecred.EncodePush(keys[0], []leasecred.Update{{Ref: ref, Until: time.Now().Add(time.Hour), Ended: true}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+leasecred.PushPath, bytes.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("push: %v %v", resp, err)
	}
	resp.Body.Close()
	res, err = proxytest.Fetch(ctx, p.URLWithAuth("inst", pass), target.URL+"/generate_204", nil)
	if err != nil || res.Status != http.StatusProxyAuthRequired {
		t.Errorf("after the push of its end: %d %v, want 407", res.Status, err)
	}
	if err := p.Terminate(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if logs := p.Logs(); !strings.Contains(logs, "leaseKeys=1") || strings.Contains(logs, text) {
		t.Errorf("logs should say leaseKeys=1 and never the key:\n%s", logs)
	}
}
