package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// Credentials distinctive enough that finding them in a message is a leak.
const (
	probeUser = "probe-user-7f3a"
	probePass = "pa55-s3cret-91cd"
)

// startSilentProxy accepts connections and never answers: a hung proxy.
func startSilentProxy(t *testing.T) string {
	t.Helper()
	return startScriptedProxy(t, "")
}

// startTLSProxy serves forward-proxy behind TLS: an External proxy with
// spec.endpoint.scheme https.
func startTLSProxy(t *testing.T) *httptest.Server {
	t.Helper()
	fp, err := forwardproxy.New(forwardproxy.Config{Username: probeUser, Password: probePass, AllowCIDRs: []netip.Prefix{proxytest.Loopback}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fp)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-certificate row's handshake errors
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		_ = fp.Close()
	})
	return srv
}

// startScriptedProxy answers every request (the head it reads up to its
// blank line) with answer, byte for byte (nothing when it is empty), and
// keeps the connection open.
func startScriptedProxy(t *testing.T, answer string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				head := bufio.NewReader(c)
				for {
					line, err := head.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				if answer != "" {
					_, _ = io.WriteString(c, answer)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func proxyURL(scheme, addr string, withAuth bool, pass string) *url.URL {
	u := &url.URL{Scheme: scheme, Host: addr}
	if withAuth {
		u.User = url.UserPassword(probeUser, pass)
	}
	return u
}

func TestProbe(t *testing.T) {
	httpsTarget := proxytest.StartHTTPSTarget(t)
	httpTarget := proxytest.StartHTTPTarget(t)
	roots := proxytest.RootCAs(httpsTarget)
	open := proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1})
	authed := proxytest.StartInProcess(t, proxytest.Options{Username: probeUser, Password: probePass, Verbosity: 1})
	tiny := proxytest.StartTinyproxy(t, proxytest.Options{})
	tinyAuthed := proxytest.StartTinyproxy(t, proxytest.Options{Username: probeUser, Password: probePass})
	tlsProxy := startTLSProxy(t)
	silent := startSilentProxy(t)
	closed := proxytest.ClosedAddr(t)
	earlyHints := startScriptedProxy(t, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
	chattyTunnel := startScriptedProxy(t, "HTTP/1.1 200 Connection established\r\n\r\nnot a TLS record")
	endlessHeaders := startScriptedProxy(t, "HTTP/1.1 204 No Content\r\nX-Padding: "+strings.Repeat("a", 4*maxDrain))
	longHeader := startScriptedProxy(t, "HTTP/1.1 204 No Content\r\nSet-Cookie: "+strings.Repeat("c", 8*probeBufferSize)+"\r\n\r\n")

	https204 := httpsTarget.URL + "/generate_204"
	http204 := httpTarget.URL + "/generate_204"
	tests := map[string]struct {
		target      Target
		wantOK      bool
		wantClass   string
		wantMessage string // a prefix of the message
	}{
		"http target through forward-proxy": {
			target: Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: http204},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"https target through CONNECT": {
			target: Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: https204, RootCAs: roots},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"https target, right credentials": {
			target: Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: https204, RootCAs: roots},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"http target, right credentials": {
			target: Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: http204},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"https target, wrong password": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, true, probePass+"-wrong"), URL: https204, RootCAs: roots},
			wantClass: ResultProxyRefused, wantMessage: "proxy answered 407 Proxy Authentication Required",
		},
		"http target, wrong password": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, true, probePass+"-wrong"), URL: http204},
			wantClass: ResultProxyRefused, wantMessage: "proxy answered 407 Proxy Authentication Required",
		},
		"https target, no credentials": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, false, ""), URL: https204, RootCAs: roots},
			wantClass: ResultProxyRefused, wantMessage: "proxy answered 407 Proxy Authentication Required",
		},
		"tinyproxy, https target": {
			target: Target{Proxy: proxyURL("http", tiny.Addr, false, ""), URL: https204, RootCAs: roots},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"tinyproxy, http target": {
			target: Target{Proxy: proxyURL("http", tiny.Addr, false, ""), URL: http204},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"tinyproxy, wrong password (it answers 401)": {
			target:    Target{Proxy: proxyURL("http", tinyAuthed.Addr, true, probePass+"-wrong"), URL: https204, RootCAs: roots},
			wantClass: ResultProxyRefused, wantMessage: "proxy answered 401 Unauthorized",
		},
		"https proxy (TLS to the proxy), https target": {
			target: Target{Proxy: proxyURL("https", tlsProxy.Listener.Addr().String(), true, probePass), URL: https204, RootCAs: roots},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"https proxy with an untrusted certificate": {
			target:    Target{Proxy: proxyURL("https", tlsProxy.Listener.Addr().String(), true, probePass), URL: https204},
			wantClass: ResultTLSError, wantMessage: "TLS handshake with the proxy: tls: failed to verify certificate: x509: certificate signed by unknown authority",
		},
		"proxy down": {
			target:    Target{Proxy: proxyURL("http", closed, true, probePass), URL: https204, RootCAs: roots},
			wantClass: ResultConnectError, wantMessage: "connecting to the proxy: connection refused",
		},
		"proxy hangs before answering CONNECT": {
			target:    Target{Proxy: proxyURL("http", silent, true, probePass), URL: https204, Timeout: 300 * time.Millisecond},
			wantClass: ResultTimeout, wantMessage: "timeout after 300ms waiting for the proxy's CONNECT answer",
		},
		"proxy hangs before answering a plain request": {
			target:    Target{Proxy: proxyURL("http", silent, true, probePass), URL: http204, Timeout: 300 * time.Millisecond},
			wantClass: ResultTimeout, wantMessage: "timeout after 300ms waiting for the response",
		},
		"target answers another status (https)": {
			target:    Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: httpsTarget.URL + "/echo", RootCAs: roots},
			wantClass: ResultUnexpectedStatus, wantMessage: "target answered 200 OK, want 204",
		},
		"another status through the proxy (http)": {
			target:    Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: httpTarget.URL + "/echo"},
			wantClass: ResultUnexpectedStatus, wantMessage: "got 200 OK through the proxy, want 204",
		},
		"expected status other than 204": {
			target: Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: httpsTarget.URL + "/echo", RootCAs: roots, ExpectedStatus: 200},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 200 in ",
		},
		"untrusted target certificate": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: https204},
			wantClass: ResultTLSError, wantMessage: "TLS handshake with the target: tls: failed to verify certificate: x509: certificate signed by unknown authority",
		},
		"insecureSkipVerify": {
			target: Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: https204, InsecureSkipVerify: true},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"serverName that the certificate does not name": {
			target:    Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: https204, RootCAs: roots, ServerName: "wrong.invalid"},
			wantClass: ResultTLSError, wantMessage: "TLS handshake with the target: tls: failed to verify certificate: x509: certificate is valid for",
		},
		"serverName that the certificate names": {
			target: Target{Proxy: proxyURL("http", open.Addr, false, ""), URL: https204, RootCAs: roots, ServerName: "example.com"},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"https target down: the proxy refuses CONNECT": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: "https://" + closed + "/generate_204", RootCAs: roots},
			wantClass: ResultProxyRefused, wantMessage: "proxy answered 502 Bad Gateway",
		},
		"http target down": {
			target:    Target{Proxy: proxyURL("http", authed.Addr, true, probePass), URL: "http://" + closed + "/generate_204"},
			wantClass: ResultUnexpectedStatus, wantMessage: "got 502 Bad Gateway through the proxy, want 204",
		},
		"1xx answers before the final one": {
			target: Target{Proxy: proxyURL("http", earlyHints, false, ""), URL: http204},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"bytes after the CONNECT answer go to the TLS handshake": {
			target:    Target{Proxy: proxyURL("http", chattyTunnel, false, ""), URL: https204, RootCAs: roots},
			wantClass: ResultTLSError, wantMessage: "TLS handshake with the target: tls: first record does not look like a TLS handshake",
		},
		"a header line longer than the probe's buffer": {
			target: Target{Proxy: proxyURL("http", longHeader, false, ""), URL: http204},
			wantOK: true, wantClass: ResultSuccess, wantMessage: "target answered 204 in ",
		},
		"headers without end: read up to a bound, not until the timeout": {
			target:    Target{Proxy: proxyURL("http", endlessHeaders, false, ""), URL: http204, Timeout: time.Minute},
			wantClass: ResultError, wantMessage: "connection closed waiting for the response",
		},
		"target URL with userinfo": {
			target:    Target{Proxy: proxyURL("http", closed, true, probePass), URL: "https://" + probeUser + ":" + probePass + "@" + closed + "/"},
			wantClass: ResultConnectError, wantMessage: "connecting to the proxy: connection refused",
		},
		"unparsable URL with userinfo": {
			target:    Target{Proxy: proxyURL("http", open.Addr, true, probePass), URL: "https://" + probeUser + ":" + probePass + "@127.0.0.1:bad port/"},
			wantClass: ResultError, wantMessage: "invalid health check URL",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tc.target.Timeout == 0 {
				tc.target.Timeout = 5 * time.Second
			}
			if tc.target.ExpectedStatus == 0 {
				tc.target.ExpectedStatus = http.StatusNoContent
			}
			got := Probe(context.Background(), tc.target)
			t.Logf("%s: %s (%v)", got.Class, got.Message, got.Latency)
			if got.OK != tc.wantOK || got.Class != tc.wantClass || !strings.HasPrefix(got.Message, tc.wantMessage) {
				t.Errorf("Probe = ok %v, class %q, message %q; want ok %v, class %q, message starting %q",
					got.OK, got.Class, got.Message, tc.wantOK, tc.wantClass, tc.wantMessage)
			}
			if strings.Contains(got.Message, probePass) || strings.Contains(got.Message, probeUser) {
				t.Errorf("the message leaks a credential: %q", got.Message)
			}
			if got.Latency <= 0 {
				t.Errorf("latency %v, want > 0", got.Latency)
			}
		})
	}
}

// TestProbeFreshConnections: every probe dials the proxy and, for https,
// sends CONNECT again; nothing is reused between probes.
func TestProbeFreshConnections(t *testing.T) {
	target := proxytest.StartHTTPSTarget(t)
	var (
		mu       sync.Mutex
		connects int
	)
	fp, err := forwardproxy.New(forwardproxy.Config{AllowCIDRs: []netip.Prefix{proxytest.Loopback}})
	if err != nil {
		t.Fatal(err)
	}
	counting := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			mu.Lock()
			connects++
			mu.Unlock()
		}
		fp.ServeHTTP(w, r)
	}))
	var dials int
	counting.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dials++
			mu.Unlock()
		}
	}
	counting.Start()
	t.Cleanup(func() {
		counting.Close()
		_ = fp.Close()
	})
	tgt := Target{
		Proxy: &url.URL{Scheme: "http", Host: counting.Listener.Addr().String()},
		URL:   target.URL + "/generate_204", ExpectedStatus: 204, Timeout: 5 * time.Second, RootCAs: proxytest.RootCAs(target),
	}
	const n = 5
	for i := range n {
		if r := Probe(context.Background(), tgt); !r.OK {
			t.Fatalf("probe %d: %s", i, r.Message)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if dials != n || connects != n {
		t.Errorf("%d probes made %d connections and %d CONNECTs, want %d each", n, dials, connects, n)
	}
}

// TestProbeConnectionOptions reads, from the kernel, the options of a
// connection a probe dials to its proxy, by IP address and by name: no
// keep-alive (a probe's deadline ends a
// connection to a dead peer, docs/decisions/0166-probe-connection-has-no-tcp-keep.md), and Nagle off, so a probe's
// small writes are not held back and its latency is the proxy's.
func TestProbeConnectionOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			conn, err := dialProxy(context.Background(), &url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			got, err := socketOptions(conn.(*net.TCPConn))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]int{"SO_KEEPALIVE": 0, "TCP_NODELAY": 1}, got); diff != "" {
				t.Errorf("socket options of a probe's connection (-want +got):\n%s", diff)
			}
		})
	}
}

// socketOptions reads conn's keep-alive and Nagle options from the kernel.
func socketOptions(conn *net.TCPConn) (map[string]int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	var optErr error
	if err := raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE": {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
			"TCP_NODELAY":  {syscall.IPPROTO_TCP, syscall.TCP_NODELAY},
		} {
			v, err := syscall.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				optErr = fmt.Errorf("getsockopt %s: %w", name, err)
				return
			}
			got[name] = v
		}
	}); err != nil {
		return nil, err
	}
	return got, optErr
}

// TestDescribeErrorStripsURLs: whatever wraps the cause, the message holds
// neither the URL nor its userinfo.
func TestDescribeErrorStripsURLs(t *testing.T) {
	const withUserinfo = "http://" + probeUser + ":" + probePass + "@127.0.0.1:3128"
	tests := map[string]struct {
		err         error
		at          stage
		wantClass   string
		wantMessage string
	}{
		"url.Error around an opaque cause": {
			err:       &url.Error{Op: "Get", URL: withUserinfo, Err: errors.New("malformed HTTP response")},
			at:        stageResponse,
			wantClass: ResultError, wantMessage: "waiting for the response: malformed HTTP response",
		},
		"url.Error around net.OpError": {
			err: &url.Error{Op: "Get", URL: withUserinfo, Err: &net.OpError{Op: "proxyconnect", Net: "tcp",
				Err: errors.New("some dial failure")}},
			at:        stageDialProxy,
			wantClass: ResultConnectError, wantMessage: "connecting to the proxy: some dial failure",
		},
		"url.Error around a deadline": {
			err:       &url.Error{Op: "Get", URL: withUserinfo, Err: context.DeadlineExceeded},
			at:        stageConnect,
			wantClass: ResultTimeout, wantMessage: "timeout after 2s waiting for the proxy's CONNECT answer",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			class, msg := describeError(tc.err, tc.at, 2*time.Second)
			if class != tc.wantClass || msg != tc.wantMessage {
				t.Errorf("describeError = %q, %q; want %q, %q", class, msg, tc.wantClass, tc.wantMessage)
			}
			if !strings.Contains(tc.err.Error(), probePass) {
				t.Fatal("the test error should hold the password, to prove it is stripped")
			}
		})
	}
}
