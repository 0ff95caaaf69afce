package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// maxDrain bounds the response body a probe reads before closing.
const maxDrain = 64 << 10

// Target is everything one probe needs. Proxy carries the credentials in its
// userinfo: never log a Target, its Proxy URL, or anything built from them.
type Target struct {
	// Proxy is scheme://host:port of the proxy (scheme http, or https for
	// TLS to the proxy itself), with user:password when it requires auth.
	Proxy *url.URL
	// URL is fetched through the proxy: absolute-form GET for http, CONNECT
	// then TLS for https.
	URL            string
	ExpectedStatus int
	Timeout        time.Duration
	// InsecureSkipVerify, ServerName and RootCAs tune TLS to the target (and
	// to an https proxy). Nil RootCAs means the system roots.
	InsecureSkipVerify bool
	ServerName         string
	RootCAs            *x509.CertPool
	// ExitIPFromBody: URL answers with the client's address as its body;
	// a successful probe reads it into Result.ExitIP.
	ExitIPFromBody bool
	// ExitInfo: URL answers a JSON object naming the client's address and
	// its country (spec.healthCheck.exitInfo); a successful probe reads
	// them into Result.ExitIP and Result.ExitCountry. Nil: not asked.
	ExitInfo *ExitInfoFields
}

// Result is the outcome of one probe.
type Result struct {
	OK bool
	// Class is one of Results, for metrics.
	Class string
	// Message says why in a few words. It never holds a credential nor the URL.
	Message string
	// Status is the final HTTP status, 0 when none arrived.
	Status int
	// Latency is the time until the response headers arrived (or the
	// failure): the dial, CONNECT and TLS included.
	Latency time.Duration
	// ExitIP is the address the target saw the probe come from
	// (Target.ExitIPFromBody), "" when not asked for.
	ExitIP string
	// ExitCountry is the exit IP's country as the target answered it
	// (Target.ExitInfo) or, after the engine resolved it, as the GeoIP
	// database knows it; "" when unknown.
	ExitCountry string
	// AnnouncedKeys is the proxy's leasecred.KeysHeader: the IDs of the
	// lease keys it checks, "" when it named none.
	AnnouncedKeys string
	// Lease is what the engine made of it against the credentials Secret
	// (worker.go); LeaseUnknown from Probe itself.
	Lease LeaseCheck
}

// asksExitIP says whether the probe reads the exit IP from the answer.
func (t Target) asksExitIP() bool { return t.ExitIPFromBody || t.ExitInfo != nil }

// Probe fetches t.URL through t.Proxy once, on a fresh connection, and
// closes it: every probe dials the proxy and, for https, exercises CONNECT
// and the TLS handshake through the tunnel (a cached tunnel would hide a
// proxy that stopped tunnelling). Success is no error and
// t.ExpectedStatus; redirects are not followed.
//
// It speaks HTTP/1.1 itself, in the calling goroutine, with net/http's
// request writer and response parser: an http.Transport for a single
// request ran three more goroutines and their hand-offs, a fifth of a
// probe's CPU (docs/decisions/0161-health-probe-speaks-http-1-1.md).
func Probe(ctx context.Context, t Target) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()

	target, err := url.Parse(t.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		// The parse error quotes the URL, which may hold userinfo.
		return Result{Class: ResultError, Message: "invalid health check URL", Latency: time.Since(start)}
	}
	p := &prober{t: t, target: target, httpsTarget: target.Scheme == "https", buf: probeBufferPool.Get().(*probeBuffers)}
	defer p.close()
	resp, err := p.fetch(ctx)
	latency := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			// The deadline or a cancellation cut the I/O short: say which.
			err = ctx.Err()
		}
		class, msg := describeError(err, p.stage, t.Timeout)
		return Result{Class: class, Message: redact(msg, t.Proxy), Latency: latency}
	}
	var exitIP, exitCountry string
	switch {
	case resp.StatusCode != t.ExpectedStatus:
	case t.ExitInfo != nil:
		exitIP, exitCountry = readExitInfo(resp.Body, *t.ExitInfo)
	case t.ExitIPFromBody:
		exitIP = readExitIP(resp.Body)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))

	res := Result{Status: resp.StatusCode, Latency: latency, AnnouncedKeys: p.announced}
	if !p.httpsTarget {
		// The proxy's own header on the forwarded answer.
		res.AnnouncedKeys = resp.Header.Get(leasecred.KeysHeader)
	}
	switch {
	case t.asksExitIP() && resp.StatusCode == t.ExpectedStatus && exitIP == "":
		res.Class = ResultUnexpectedStatus
		res.Message = fmt.Sprintf("target answered %d without an IP address as its body (spec.healthCheck.exitIPFromBody)", resp.StatusCode)
		if t.ExitInfo != nil {
			res.Message = fmt.Sprintf("target answered %d without an IP address in JSON member %q (spec.healthCheck.exitInfo.ipField)",
				resp.StatusCode, orDefault(t.ExitInfo.IPField, DefaultExitInfoIPField))
		}
	case resp.StatusCode == t.ExpectedStatus:
		res.OK, res.Class, res.ExitIP, res.ExitCountry = true, ResultSuccess, exitIP, exitCountry
		res.Message = fmt.Sprintf("target answered %d in %s", resp.StatusCode, roundLatency(latency))
		if exitIP != "" {
			res.Message += " from exit IP " + exitIP
		}
	case resp.StatusCode == http.StatusProxyAuthRequired:
		// Only a proxy sends 407 (to an http target; to CONNECT it is a
		// proxyAnswerError).
		res.Class, res.Message = ResultProxyRefused, "proxy answered "+statusText(resp.StatusCode)
	case p.httpsTarget:
		// Inside the TLS tunnel: the answer is the target's own.
		res.Class = ResultUnexpectedStatus
		res.Message = fmt.Sprintf("target answered %s, want %d", statusText(resp.StatusCode), t.ExpectedStatus)
	default:
		// Plain http: the answer may be the target's or the proxy's (a 502
		// for an unreachable target), so say only what came back.
		res.Class = ResultUnexpectedStatus
		res.Message = fmt.Sprintf("got %s through the proxy, want %d", statusText(resp.StatusCode), t.ExpectedStatus)
	}
	return res
}

// prober is one probe's connection and how far it got.
type prober struct {
	t Target
	// announced is the CONNECT answer's leasecred.KeysHeader.
	announced   string
	target      *url.URL
	httpsTarget bool
	stage       stage
	conn        net.Conn
	stopCancel  func() bool
	buf         *probeBuffers
}

// probeBuffers are the buffered reader and writer of one probe, pooled:
// new ones were 8 KiB of a probe's 14 (net/http's request writer makes a
// writer of its own when given none). They are small because a probe's
// request and the heads it reads are, and because the pool keeps one pair
// for every probe of a tick's burst: 4 KiB ones were 4 MB of the
// operator's live heap at 10,000 proxies.
type probeBuffers struct {
	r *bufio.Reader
	w *bufio.Writer
}

const probeBufferSize = 512

var probeBufferPool = sync.Pool{New: func() any {
	return &probeBuffers{r: bufio.NewReaderSize(nil, probeBufferSize), w: bufio.NewWriterSize(nil, probeBufferSize)}
}}

// newRequest is a request for method, u and host, with User-Agent its only
// header. Each probe makes its own (pooling them did not pay:
// docs/decisions/0180-plain-probe-request-and-dial.md).
func newRequest(method string, u *url.URL, host string) *http.Request {
	return &http.Request{Method: method, URL: u, Host: host, Header: http.Header{"User-Agent": {userAgent}}}
}

// write writes req to conn, absolute-form (to the proxy) or not.
func (p *prober) write(conn net.Conn, req *http.Request, absolute bool) error {
	p.buf.w.Reset(conn)
	write := req.Write
	if absolute {
		write = req.WriteProxy
	}
	if err := write(p.buf.w); err != nil {
		return err
	}
	return p.buf.w.Flush()
}

// read reads req's response from conn, headers and body together bounded
// by limit (a misbehaving server cannot make a probe read without end).
func (p *prober) read(conn net.Conn, req *http.Request, limit int64) (*http.Response, error) {
	p.buf.r.Reset(io.LimitReader(conn, limit))
	for {
		resp, err := http.ReadResponse(p.buf.r, req)
		if err != nil {
			return nil, err
		}
		// 1xx answers (103 Early Hints, a stray 100) come before the final
		// one; a CONNECT answer is final whatever it is.
		if resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols && req.Method != http.MethodConnect {
			continue
		}
		return resp, nil
	}
}

// probeDialer dials a probe's connection without TCP keep-alive: the
// probe's deadline, not keep-alive, ends a connection to a dead peer, and
// the four setsockopt calls that turn it on were a third of a probe's
// system calls (docs/decisions/0166-probe-connection-has-no-tcp-keep.md).
var probeDialer = net.Dialer{KeepAlive: -1}

// dialProxy connects to the proxy.
func dialProxy(ctx context.Context, proxy *url.URL) (net.Conn, error) {
	return probeDialer.DialContext(ctx, "tcp", hostPort(proxy))
}

// fetch dials the proxy and returns the final response, its body still to
// read from the connection.
func (p *prober) fetch(ctx context.Context) (*http.Response, error) {
	p.stage = stageDialProxy
	conn, err := dialProxy(ctx, p.t.Proxy)
	if err != nil {
		return nil, err
	}
	p.conn = conn
	// The probe's timeout bounds every read and write; a cancellation
	// (the engine stopping) cuts them short.
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	p.stopCancel = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })

	if p.t.Proxy.Scheme == "https" {
		p.stage = stageProxyTLS
		tlsConn := tls.Client(conn, p.tlsConfig(p.t.Proxy.Hostname()))
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		conn = tlsConn
		p.conn = conn
	}
	if !p.httpsTarget {
		// Absolute-form GET to the proxy, which fetches the target.
		p.stage = stageResponse
		req := p.request(true)
		if err := p.write(conn, req, true); err != nil {
			return nil, err
		}
		return p.read(conn, req, 2*maxDrain)
	}

	p.stage = stageConnect
	addr := hostPort(p.target)
	connect := newRequest(http.MethodConnect, &url.URL{Opaque: addr}, addr)
	setProxyAuth(connect.Header, p.t.Proxy)
	if err := p.write(conn, connect, false); err != nil {
		return nil, err
	}
	answer, err := p.read(conn, connect, maxDrain)
	if err != nil {
		return nil, err
	}
	answer.Body.Close()
	p.announced = answer.Header.Get(leasecred.KeysHeader)
	if n := p.buf.r.Buffered(); n > 0 {
		// Bytes after the answer are the tunnel's: the TLS client reads
		// them first.
		ahead, _ := p.buf.r.Peek(n)
		conn = &bufferedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(slices.Clone(ahead)), conn)}
	}
	p.stage = stageTargetTLS
	if answer.StatusCode != http.StatusOK {
		return nil, &proxyAnswerError{status: answer.StatusCode}
	}
	tlsConn := tls.Client(conn, p.tlsConfig(p.target.Hostname()))
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	p.conn = tlsConn
	p.stage = stageResponse
	req := p.request(false)
	if err := p.write(tlsConn, req, false); err != nil {
		return nil, err
	}
	return p.read(tlsConn, req, 2*maxDrain)
}

const userAgent = "proxy-operator-health"

// request is the GET of the target: for the proxy itself (absolute-form,
// with the proxy's credentials) or through a tunnel.
func (p *prober) request(viaProxy bool) *http.Request {
	req := newRequest(http.MethodGet, p.target, p.target.Host)
	req.Close = true
	if viaProxy {
		setProxyAuth(req.Header, p.t.Proxy)
	}
	if u := p.target.User; u != nil {
		// What http.Client does with a URL's userinfo.
		pass, _ := u.Password()
		req.SetBasicAuth(u.Username(), pass)
	}
	return req
}

// tlsConfig is TLS to name (the target, or an https proxy): spec.healthCheck.tls
// applies to both, as it did through http.Transport.
func (p *prober) tlsConfig(name string) *tls.Config {
	cfg := &tls.Config{
		InsecureSkipVerify: p.t.InsecureSkipVerify, //nolint:gosec // the user asked for it in spec.healthCheck.tls
		ServerName:         p.t.ServerName,
		RootCAs:            p.t.RootCAs,
	}
	if cfg.ServerName == "" {
		cfg.ServerName = name
	}
	return cfg
}

func (p *prober) close() {
	if p.stopCancel != nil {
		p.stopCancel()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.buf.r.Reset(nil)
	p.buf.w.Reset(nil)
	probeBufferPool.Put(p.buf)
}

// setProxyAuth adds the proxy's basic-auth credentials from its URL.
func setProxyAuth(h http.Header, proxy *url.URL) {
	if proxy.User == nil {
		return
	}
	pass, _ := proxy.User.Password()
	h.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(proxy.User.Username()+":"+pass)))
}

// hostPort is u's host with its port, the scheme's default if none.
func hostPort(u *url.URL) string {
	if port := u.Port(); port != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// proxyAnswerError is a proxy refusing CONNECT.
type proxyAnswerError struct{ status int }

func (e *proxyAnswerError) Error() string { return "proxy answered " + statusText(e.status) }

func statusText(code int) string {
	if text := http.StatusText(code); text != "" {
		return strconv.Itoa(code) + " " + text
	}
	return strconv.Itoa(code)
}

// roundLatency keeps messages short: 3ms, 120ms, 1.2s.
func roundLatency(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// stage is how far a probe got; it names where a failure happened.
type stage int32

const (
	stageDialProxy stage = iota
	stageProxyTLS
	stageConnect
	stageTargetTLS
	stageResponse
)

func (s stage) String() string {
	switch s {
	case stageDialProxy:
		return "connecting to the proxy"
	case stageProxyTLS:
		return "TLS handshake with the proxy"
	case stageConnect:
		return "waiting for the proxy's CONNECT answer"
	case stageTargetTLS:
		return "TLS handshake with the target"
	default:
		return "waiting for the response"
	}
}

// describeError turns a failed request into a result class and a message of
// a few words. It never quotes URLs (they may hold userinfo), only the
// innermost cause and the stage where it happened.
func describeError(err error, at stage, timeout time.Duration) (class, message string) {
	var refused *proxyAnswerError
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.As(err, &refused):
		return ResultProxyRefused, refused.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return ResultTimeout, fmt.Sprintf("timeout after %s %s", timeout, at)
	case errors.Is(err, context.Canceled):
		return ResultError, "canceled " + at.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return ResultConnectError, at.String() + ": connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return ResultConnectError, at.String() + ": no route to host"
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &recordErr),
		(at == stageProxyTLS || at == stageTargetTLS) && !isClosed(err):
		return ResultTLSError, at.String() + ": " + innermost(err)
	case isClosed(err):
		if at == stageTargetTLS {
			// The proxy accepted CONNECT and then dropped the tunnel:
			// usually it could not reach the target.
			return ResultError, "tunnel closed during the TLS handshake with the target"
		}
		return ResultError, "connection closed " + at.String()
	case at == stageDialProxy:
		return ResultConnectError, at.String() + ": " + innermost(err)
	default:
		return ResultError, at.String() + ": " + innermost(err)
	}
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// innermost strips the wrappers that name URLs and addresses (url.Error,
// net.OpError) and returns the cause's text.
func innermost(err error) string {
	for {
		var urlErr *url.Error
		var opErr *net.OpError
		switch {
		case errors.As(err, &urlErr):
			err = urlErr.Err
		case errors.As(err, &opErr) && opErr.Err != nil:
			err = opErr.Err
		default:
			return err.Error()
		}
	}
}

// redact removes the proxy password from a message, a last line of defence:
// no message is built from anything that holds it.
func redact(msg string, proxy *url.URL) string {
	if proxy == nil || proxy.User == nil {
		return msg
	}
	if pass, ok := proxy.User.Password(); ok && pass != "" {
		msg = strings.ReplaceAll(msg, pass, "***")
	}
	return msg
}

// maxExitIPBody bounds what is read of an echo's answer: an IPv6 address
// and a newline fit.
const maxExitIPBody = 64

// readExitIP reads an echo's answer: an IP address, alone in the body
// (surrounding space allowed); "" for anything else.
func readExitIP(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxExitIPBody+1))
	if len(b) > maxExitIPBody {
		return ""
	}
	ip := net.ParseIP(strings.TrimSpace(string(b)))
	if ip == nil {
		return ""
	}
	return ip.String()
}
