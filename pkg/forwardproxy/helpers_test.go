package forwardproxy_test

import (
	"bufio"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }

// ioTimeout bounds every blocking read or dial in these tests so a bug
// fails instead of hanging; no test relies on it elapsing.
const ioTimeout = 10 * time.Second

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// conn is a raw client connection to a proxy.
type conn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	return &conn{t: t, Conn: c, r: bufio.NewReader(c)}
}

// roundTrip writes a raw request and reads the response (body read fully).
func (c *conn) roundTrip(raw string) (*http.Response, string) {
	c.t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		c.t.Fatalf("writing request: %v", err)
	}
	return c.readResponse(raw[:strings.IndexByte(raw, ' ')])
}

func (c *conn) readResponse(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil && method != http.MethodConnect {
		c.t.Fatalf("reading body: %v", err)
	}
	return resp, string(body)
}

// connect sends CONNECT target (with Proxy-Authorization auth when not
// empty) and returns the response; on 200 the connection is a tunnel.
func connect(t *testing.T, proxyAddr, target, auth string) (*conn, *http.Response) {
	t.Helper()
	c := dial(t, proxyAddr)
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatalf("writing CONNECT: %v", err)
	}
	resp, err := http.ReadResponse(c.r, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("reading CONNECT response: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return c, resp
}

// ping writes msg into a tunnel to an echo target and checks it comes back.
func (c *conn) ping(msg string) {
	c.t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		c.t.Fatalf("writing into tunnel: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c.r, buf); err != nil {
		c.t.Fatalf("reading from tunnel: %v", err)
	}
	if string(buf) != msg {
		c.t.Fatalf("tunnel echoed %q, want %q", buf, msg)
	}
}

// expectClosed reads until the proxy closes the connection.
func (c *conn) expectClosed() {
	c.t.Helper()
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open after %v", ioTimeout)
	}
}

// echoTarget is a TCP server on 127.0.0.1 that echoes what it reads and
// half-closes when the client does.
type echoTarget struct {
	net.Listener
	wg sync.WaitGroup
}

func startEchoTarget(t *testing.T) *echoTarget {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoTarget{Listener: l}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		e.wg.Wait()
	})
	return e
}

func (e *echoTarget) addr() string { return e.Addr().String() }

// startProxy runs an in-process forward proxy named "test-proxy".
func startProxy(t *testing.T, opts proxytest.Options) *proxytest.Proxy {
	t.Helper()
	configure := opts.Configure
	opts.Configure = func(c *forwardproxy.Config) {
		c.Name = "test-proxy"
		if configure != nil {
			configure(c)
		}
	}
	return proxytest.StartInProcess(t, opts)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := proxytest.Poll(ioTimeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
