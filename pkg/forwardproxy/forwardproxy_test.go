package forwardproxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// received is what a recording target saw.
type received struct {
	RequestURI string
	Header     http.Header
}

// startRecordingTarget starts an HTTP target on 127.0.0.1 that records each
// request and answers with hop-by-hop headers of its own.
func startRecordingTarget(t *testing.T) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- received{RequestURI: r.RequestURI, Header: r.Header.Clone()}
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "drop")
		w.Header().Set("Keep-Alive", "timeout=1")
		w.Header().Set("Proxy-Authenticate", `Basic realm="upstream"`)
		w.Header().Set("X-Resp-Keep", "yes")
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestForwardHeaders(t *testing.T) {
	target, got := startRecordingTarget(t)
	host := target.Listener.Addr().String()
	tests := map[string]struct {
		xff     bool
		headers string // extra raw request headers
		want    http.Header
	}{
		"hop-by-hop removed, Via added": {
			headers: "Connection: keep-alive, X-Hop\r\n" +
				"X-Hop: drop\r\n" +
				"Proxy-Connection: keep-alive\r\n" +
				"Keep-Alive: timeout=5\r\n" +
				"TE: trailers\r\n" +
				"Trailer: X-Checksum\r\n" +
				"Upgrade: h2c\r\n" +
				"Proxy-Authorization: " + basic("user", "pass") + "\r\n" +
				"X-End-To-End: kept\r\n",
			want: http.Header{"X-End-To-End": {"kept"}, "Via": {"1.1 test-proxy"}},
		},
		"protocol upgrade not forwarded": {
			headers: "Connection: Upgrade\r\nUpgrade: websocket\r\nProxy-Authorization: " + basic("user", "pass") + "\r\n",
			want:    http.Header{"Via": {"1.1 test-proxy"}},
		},
		"Via appended to the client's": {
			headers: "Via: 1.0 client-side\r\nProxy-Authorization: " + basic("user", "pass") + "\r\n",
			want:    http.Header{"Via": {"1.0 client-side, 1.1 test-proxy"}},
		},
		"X-Forwarded-For off: origin not leaked, client's dropped": {
			headers: "X-Forwarded-For: 127.0.0.9\r\nForwarded: for=127.0.0.9\r\nProxy-Authorization: " + basic("user", "pass") + "\r\n",
			want:    http.Header{"Via": {"1.1 test-proxy"}},
		},
		"X-Forwarded-For on: client IP appended": {
			xff:     true,
			headers: "X-Forwarded-For: 127.0.0.9\r\nProxy-Authorization: " + basic("user", "pass") + "\r\n",
			want:    http.Header{"Via": {"1.1 test-proxy"}, "X-Forwarded-For": {"127.0.0.9, 127.0.0.1"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := startProxy(t, proxytest.Options{
				Username: "user", Password: "pass",
				Configure: func(c *forwardproxy.Config) { c.XForwardedFor = tc.xff },
			})
			c := dial(t, p.Addr)
			// The semicolon makes the query unparsable for url.ParseQuery;
			// a forward proxy must pass it on untouched.
			uri := "/echo?a=1;b=2"
			resp, body := c.roundTrip("GET http://" + host + uri + " HTTP/1.1\r\nHost: " + host + "\r\n" + tc.headers + "\r\n")
			if resp.StatusCode != http.StatusOK || body != "hello" {
				t.Fatalf("response %s %q, want 200 \"hello\"", resp.Status, body)
			}
			if diff := cmp.Diff(received{RequestURI: uri, Header: tc.want}, <-got); diff != "" {
				t.Errorf("target received (-want +got):\n%s", diff)
			}
			wantResp := map[string]string{"Via": "1.1 test-proxy", "X-Resp-Keep": "yes", "X-Resp-Hop": "", "Keep-Alive": "", "Proxy-Authenticate": "", "Connection": ""}
			gotResp := map[string]string{}
			for k := range wantResp {
				gotResp[k] = resp.Header.Get(k)
			}
			if diff := cmp.Diff(wantResp, gotResp); diff != "" {
				t.Errorf("response headers to the client (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDirectRequests(t *testing.T) {
	p := startProxy(t, proxytest.Options{Username: "user", Password: "pass"})
	type result struct {
		Status int
		Body   string
	}
	tests := map[string]struct {
		request string
		want    result
	}{
		"GET /healthz, no credentials needed": {"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n", result{200, "ok"}},
		"HEAD /healthz":                       {"HEAD /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n", result{200, ""}},
		"GET /":                               {"GET / HTTP/1.1\r\nHost: proxy\r\n\r\n", result{400, "400 this is a forward proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port\n"}},
		"POST /healthz":                       {"POST /healthz HTTP/1.1\r\nHost: proxy\r\nContent-Length: 0\r\n\r\n", result{400, "400 this is a forward proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port\n"}},
		"OPTIONS *":                           {"OPTIONS * HTTP/1.1\r\nHost: proxy\r\n\r\n", result{400, "400 this is a forward proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port\n"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := dial(t, p.Addr).roundTrip(tc.request)
			if diff := cmp.Diff(tc.want, result{resp.StatusCode, body}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProxyErrors(t *testing.T) {
	down := proxytest.ClosedAddr(t)
	blackhole := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "127.0.0.1:9" {
			<-ctx.Done() // a target that never answers the SYN
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	p := startProxy(t, proxytest.Options{
		Username: "user", Password: "pass",
		Configure: func(c *forwardproxy.Config) {
			c.DialContext = blackhole
			c.DialTimeout = 50 * time.Millisecond
		},
	})
	auth := "Proxy-Authorization: " + basic("user", "pass") + "\r\n"
	type result struct {
		Status            int
		Body              string
		ProxyAuthenticate string
	}
	tests := map[string]struct {
		request string
		want    result
	}{
		"target down":                {"GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\n" + auth + "\r\n", result{502, "502 cannot connect to target\n", ""}},
		"CONNECT target down":        {"CONNECT " + down + " HTTP/1.1\r\nHost: " + down + "\r\n" + auth + "\r\n", result{502, "502 cannot connect to target\n", ""}},
		"dial timeout":               {"GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\n" + auth + "\r\n", result{504, "504 timed out connecting to target\n", ""}},
		"CONNECT dial timeout":       {"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n" + auth + "\r\n", result{504, "504 timed out connecting to target\n", ""}},
		"CONNECT without port":       {"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "\r\n", result{400, "400 CONNECT needs host:port\n", ""}},
		"https absolute URI":         {"GET https://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\n" + auth + "\r\n", result{400, "400 only http:// URIs are forwarded; use CONNECT for https\n", ""}},
		"no credentials":             {"GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\n\r\n", result{407, "407 proxy authentication required\n", `Basic realm="proxy"`}},
		"wrong password":             {"GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\nProxy-Authorization: " + basic("user", "pas") + "\r\n\r\n", result{407, "407 proxy authentication required\n", `Basic realm="proxy"`}},
		"not basic":                  {"GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\nProxy-Authorization: Bearer abc\r\n\r\n", result{407, "407 proxy authentication required\n", `Basic realm="proxy"`}},
		"CONNECT wrong username":     {"CONNECT " + down + " HTTP/1.1\r\nHost: " + down + "\r\nProxy-Authorization: " + basic("usr", "pass") + "\r\n\r\n", result{407, "407 proxy authentication required\n", `Basic realm="proxy"`}},
		"lower-case scheme accepted": {"GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\nProxy-Authorization: basic " + strings.TrimPrefix(basic("user", "pass"), "Basic ") + "\r\n\r\n", result{502, "502 cannot connect to target\n", ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := dial(t, p.Addr).roundTrip(tc.request)
			got := result{resp.StatusCode, body, resp.Header.Get("Proxy-Authenticate")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConnectTunnel(t *testing.T) {
	echo := startEchoTarget(t)
	p := startProxy(t, proxytest.Options{})

	t.Run("bytes flow both ways", func(t *testing.T) {
		c, resp := connect(t, p.Addr, echo.addr(), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		c.ping("hello")
		c.ping(strings.Repeat("x", 100<<10))
	})

	t.Run("bytes pipelined behind CONNECT", func(t *testing.T) {
		// Clients may send the TLS ClientHello without waiting for the 200.
		c := dial(t, p.Addr)
		_, err := io.WriteString(c, "CONNECT "+echo.addr()+" HTTP/1.1\r\nHost: "+echo.addr()+"\r\n\r\nearly bytes")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(c.r, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		buf := make([]byte, len("early bytes"))
		if _, err := io.ReadFull(c.r, buf); err != nil || string(buf) != "early bytes" {
			t.Fatalf("echoed %q, %v", buf, err)
		}
	})

	t.Run("half-close", func(t *testing.T) {
		// The client closes its write side; the target's answer still
		// arrives, then the tunnel closes.
		c, resp := connect(t, p.Addr, echo.addr(), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		if _, err := io.WriteString(c, "last words"); err != nil {
			t.Fatal(err)
		}
		if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(c.r)
		if err != nil || string(rest) != "last words" {
			t.Fatalf("read %q, %v; want \"last words\" then EOF", rest, err)
		}
		waitFor(t, "tunnel to be gone", func() bool { return p.Server.Stats().Tunnels == 0 })
	})

	t.Run("TLS inside the tunnel", func(t *testing.T) {
		target := proxytest.StartHTTPSTarget(t)
		c, resp := connect(t, p.Addr, target.Listener.Addr().String(), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: proxytest.RootCAs(target), ServerName: "127.0.0.1"})
		if _, err := io.WriteString(tc, "GET /generate_204 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || r.StatusCode != http.StatusNoContent {
			t.Fatalf("GET inside tunnel: %v %v", r, err)
		}
	})
}

func TestTunnelIdleTimeout(t *testing.T) {
	echo := startEchoTarget(t)
	p := startProxy(t, proxytest.Options{Configure: func(c *forwardproxy.Config) { c.IdleTimeout = 100 * time.Millisecond }})
	c, resp := connect(t, p.Addr, echo.addr(), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	c.ping("ping")
	c.expectClosed() // nothing sent: the proxy closes the tunnel
	waitFor(t, "tunnel to be gone", func() bool { return p.Server.Stats().Tunnels == 0 })
}

func TestMaxConns(t *testing.T) {
	echo := startEchoTarget(t)
	target := proxytest.StartHTTPTarget(t)
	host := target.Listener.Addr().String()
	p := startProxy(t, proxytest.Options{Configure: func(c *forwardproxy.Config) { c.MaxConns = 2 }})

	// Two tunnels hold both connections.
	var tunnels []*conn
	for range 2 {
		c, resp := connect(t, p.Addr, echo.addr(), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT within the limit: %s", resp.Status)
		}
		c.ping("hold")
		tunnels = append(tunnels, c)
	}

	// A third CONNECT is refused before any dial, plain HTTP gets 503.
	_, resp := connect(t, p.Addr, echo.addr(), "")
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("CONNECT beyond the limit: %s (close=%v), want 503 and close", resp.Status, resp.Close)
	}
	resp, _ = dial(t, p.Addr).roundTrip("GET http://" + host + "/generate_204 HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("GET beyond the limit: %s Retry-After=%q, want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	// Liveness probes still pass.
	resp, body := dial(t, p.Addr).roundTrip("GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("/healthz beyond the limit: %s %q", resp.Status, body)
	}
	for _, tun := range tunnels {
		tun.ping("still open")
	}

	// Closing one tunnel frees a slot.
	tunnels[0].Close()
	waitFor(t, "one connection left", func() bool { return p.Server.Stats().Conns == 1 })
	c, resp := connect(t, p.Addr, echo.addr(), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT after a slot was freed: %s", resp.Status)
	}
	c.ping("again")
}

func TestShutdownWaitsForTunnel(t *testing.T) {
	echo := startEchoTarget(t)
	srv, addr, served := serve(t, forwardproxy.Config{})
	c, resp := connect(t, addr, echo.addr(), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}

	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	waitFor(t, "listener to close", func() bool { return !canDial(addr) })

	c.ping("still tunnelling during shutdown")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a tunnel was open", err)
	default:
	}

	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("Shutdown did not return after the tunnel closed")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

func TestShutdownDeadlineClosesTunnel(t *testing.T) {
	echo := startEchoTarget(t)
	srv, addr, _ := serve(t, forwardproxy.Config{})
	c, resp := connect(t, addr, echo.addr(), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	waitFor(t, "listener to close", func() bool { return !canDial(addr) })
	c.ping("before the deadline")

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown returned %v, want context.Canceled", err)
	}
	c.expectClosed()
	if st := srv.Stats(); st != (forwardproxy.Stats{}) {
		t.Errorf("after Shutdown: %+v, want nothing open", st)
	}
}

func TestShutdownWaitsForRequest(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		_, _ = io.WriteString(w, "late")
	}))
	t.Cleanup(target.Close)
	host := target.Listener.Addr().String()
	srv, addr, _ := serve(t, forwardproxy.Config{})

	c := dial(t, addr)
	if _, err := io.WriteString(c, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-arrived
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	waitFor(t, "listener to close", func() bool { return !canDial(addr) })
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, body := c.readResponse(http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "late" {
		t.Errorf("in-flight request: %s %q, want 200 \"late\"", resp.Status, body)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestCredentialsNotLogged(t *testing.T) {
	const user, pass = "log-user-x7", "log-pass-q9"
	echo := startEchoTarget(t)
	target := proxytest.StartHTTPTarget(t)
	host := target.Listener.Addr().String()
	down := proxytest.ClosedAddr(t)
	p := startProxy(t, proxytest.Options{Username: user, Password: pass, Verbosity: 10})

	for _, auth := range []string{basic(user, pass), basic(user, "wrong-"+pass), basic("wrong-"+user, pass), "Basic !!!" + pass, ""} {
		h := ""
		if auth != "" {
			h = "Proxy-Authorization: " + auth + "\r\n"
		}
		dial(t, p.Addr).roundTrip("GET http://" + host + "/echo HTTP/1.1\r\nHost: " + host + "\r\n" + h + "\r\n")
		dial(t, p.Addr).roundTrip("GET http://" + down + "/ HTTP/1.1\r\nHost: " + down + "\r\n" + h + "\r\n")
		c, resp := connect(t, p.Addr, echo.addr(), auth)
		if resp.StatusCode == http.StatusOK {
			c.ping("x")
			c.Close()
		}
	}
	waitFor(t, "tunnels to close", func() bool { return p.Server.Stats().Tunnels == 0 })

	logs := p.Logs()
	for _, want := range []string{"Refusing request", "Forwarded", "Tunnel closed", "Forwarding failed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q; the test would prove nothing:\n%s", want, logs)
		}
	}
	for _, secret := range []string{user, pass, strings.TrimPrefix(basic(user, pass), "Basic ")} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain the credential %q:\n%s", secret, logs)
		}
	}
}

func TestNewValidates(t *testing.T) {
	tests := map[string]struct {
		cfg     forwardproxy.Config
		wantErr bool
	}{
		"zero value":            {forwardproxy.Config{}, false},
		"username and password": {forwardproxy.Config{Username: "u", Password: "p"}, false},
		"username only":         {forwardproxy.Config{Username: "u"}, true},
		"password only":         {forwardproxy.Config{Password: "pw-secret"}, true},
		"colon in username":     {forwardproxy.Config{Username: "u:x", Password: "pw-secret"}, true},
		"name with space":       {forwardproxy.Config{Name: "my proxy"}, true},
		"negative max conns":    {forwardproxy.Config{MaxConns: -1}, true},
		"negative dial timeout": {forwardproxy.Config{DialTimeout: -time.Second}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := forwardproxy.New(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Errorf("New: %v, want error %v", err, tc.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), tc.cfg.Password) && tc.cfg.Password != "") {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

func TestParseListeningLine(t *testing.T) {
	tests := map[string]struct {
		line   string
		want   string
		wantOK bool
	}{
		"klog text, unquoted": {`I1130 09:39:33.138437   11030 main.go:106] "listening" addr=127.0.0.1:35653`, "127.0.0.1:35653", true},
		"quoted value":        {`I1130 09:39:33.138437   11030 main.go:106] "listening" addr="127.0.0.1:35653"`, "127.0.0.1:35653", true},
		"IPv6":                {`I1130 main.go:106] "listening" addr=[::1]:3128`, "[::1]:3128", true},
		"other message":       {`I1130 main.go:103] "Configuration" addr=127.0.0.1:1`, "", false},
		"no addr":             {`I1130 main.go:106] "listening"`, "", false},
		"garbage addr":        {`I1130 main.go:106] "listening" addr=nonsense`, "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := forwardproxy.ParseListeningLine(tc.line)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ParseListeningLine = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// serve runs a Server on 127.0.0.1 without proxytest's cleanup, for tests
// that shut it down themselves. It admits loopback, as proxytest does.
func serve(t *testing.T, cfg forwardproxy.Config) (*forwardproxy.Server, string, <-chan error) {
	t.Helper()
	cfg.AllowCIDRs = append(cfg.AllowCIDRs, proxytest.Loopback)
	cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	srv, err := forwardproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return srv, l.Addr().String(), served
}

func canDial(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
