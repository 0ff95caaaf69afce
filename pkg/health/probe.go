package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
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
}

// Probe fetches t.URL through t.Proxy once, on a fresh connection: keep-alives
// are off so that every probe dials the proxy and, for https, exercises
// CONNECT and the TLS handshake through the tunnel (a cached tunnel would
// hide a proxy that stopped tunnelling). Success is no error and
// t.ExpectedStatus; redirects are not followed.
func Probe(ctx context.Context, t Target) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()

	p := &progress{httpsTarget: strings.HasPrefix(strings.ToLower(t.URL), "https:")}
	tr := &http.Transport{
		Proxy:       http.ProxyURL(t.Proxy),
		DialContext: (&net.Dialer{}).DialContext,
		TLSClientConfig: &tls.Config{
			InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // the user asked for it in spec.healthCheck.tls
			ServerName:         t.ServerName,
			RootCAs:            t.RootCAs,
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxDrain,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			p.set(stageTargetTLS)
			if resp.StatusCode != http.StatusOK {
				return &proxyAnswerError{status: resp.StatusCode}
			}
			return nil
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, p.trace()), http.MethodGet, t.URL, nil)
	if err != nil {
		// The parse error quotes the URL, which may hold userinfo.
		return Result{Class: ResultError, Message: "invalid health check URL", Latency: time.Since(start)}
	}
	req.Header.Set("User-Agent", "proxy-operator-health")

	resp, err := client.Do(req)
	latency := time.Since(start)
	if err != nil {
		class, msg := describeError(err, p.get(), t.Timeout)
		return Result{Class: class, Message: redact(msg, t.Proxy), Latency: latency}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()

	res := Result{Status: resp.StatusCode, Latency: latency}
	switch {
	case resp.StatusCode == t.ExpectedStatus:
		res.OK, res.Class = true, ResultSuccess
		res.Message = fmt.Sprintf("target answered %d in %s", resp.StatusCode, roundLatency(latency))
	case resp.StatusCode == http.StatusProxyAuthRequired:
		// Only a proxy sends 407 (to an http target; to CONNECT it is
		// caught in OnProxyConnectResponse).
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

// progress follows a probe through its stages (set from the transport's
// goroutines).
type progress struct {
	httpsTarget bool
	stage       atomic.Int32
}

func (p *progress) set(s stage) { p.stage.Store(int32(s)) }
func (p *progress) get() stage  { return stage(p.stage.Load()) }

func (p *progress) trace() *httptrace.ClientTrace {
	// What follows the connection to the proxy (and its TLS handshake, for
	// an https proxy): CONNECT for https targets, the request otherwise.
	next := stageResponse
	if p.httpsTarget {
		next = stageConnect
	}
	return &httptrace.ClientTrace{
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				p.set(next)
			}
		},
		TLSHandshakeStart: func() {
			// The target's handshake starts only after CONNECT's answer
			// (stageTargetTLS); any other is with an https proxy.
			if p.get() != stageTargetTLS {
				p.set(stageProxyTLS)
			}
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err == nil && p.get() == stageProxyTLS {
				p.set(next)
			}
		},
		GotConn: func(httptrace.GotConnInfo) { p.set(stageResponse) },
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
