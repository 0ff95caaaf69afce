package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync/atomic"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 (and the
// Proxy-Connection of old clients): they concern one connection, so they are
// dropped both ways; so is every header the Connection header names. The
// client's Proxy-Authorization (its bearer token) is among them: it never
// reaches an upstream.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

type upstreamKey struct{}

// upstreamOf is the transport's Proxy function: the leased upstream the
// request's context carries, credentials included (the transport sends them
// as Proxy-Authorization).
func upstreamOf(r *http.Request) (*url.URL, error) {
	u, _ := r.Context().Value(upstreamKey{}).(*url.URL)
	if u == nil {
		return nil, errors.New("gateway: no upstream for this request")
	}
	return u, nil
}

// servePlain forwards an absolute-form http:// request through a leased
// upstream (forward).
func (g *Gateway) servePlain(w http.ResponseWriter, r *http.Request, c caller) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, "this is a proxy: send absolute-form http:// requests, or CONNECT for anything else", 0)
		return
	}
	if r.URL.Scheme != "http" {
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("plain requests must be http://, got %q: use CONNECT for https", truncate(r.URL.Scheme)), 0)
		return
	}
	g.forward(w, r, c)
}

// roundTrip sends out through u's upstream. written says whether its
// headers were written on the connection that leads to the target (to the
// upstream for plain HTTP, which may have passed them on; inside the
// tunnel for HTTPS): from then on the target may have acted on it.
func (g *Gateway) roundTrip(out *http.Request, u *use) (resp *http.Response, written bool, err error) {
	var wrote atomic.Bool
	ctx := httptrace.WithClientTrace(context.WithValue(out.Context(), upstreamKey{}, u.h.upstream()),
		&httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req := out.WithContext(ctx)
	if out.Body != nil {
		req.Body = countingReader{out.Body, g, u.h}
	}
	resp, err = g.transport.RoundTrip(req)
	if err != nil {
		// Go's proxy errors can quote the proxy URL; keep credentials out.
		return nil, wrote.Load(), errors.New(redact(err.Error(), u.h.upstream()))
	}
	return resp, true, nil
}

// copyResponse answers with resp: prefix (the body's first bytes, read
// to judge it) and then the rest of its body.
func (g *Gateway) copyResponse(w http.ResponseWriter, resp *http.Response, prefix []byte, h *holding) {
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	written, _ := w.Write(prefix)
	n, _ := io.Copy(flushWriter{w}, resp.Body)
	g.addBytes(DirectionDown, h, n+int64(written))
}

// redact removes an upstream's password from a message, should a library
// have quoted its URL.
func redact(msg string, u *url.URL) string {
	if u.User == nil {
		return msg
	}
	if pass, ok := u.User.Password(); ok && pass != "" {
		msg = strings.ReplaceAll(msg, pass, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(pass), "xxxxx")
	}
	return msg
}

// countingReader counts a request body's bytes as they go upstream.
type countingReader struct {
	r io.ReadCloser
	g *Gateway
	h *holding
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.g.addBytes(DirectionUp, c.h, int64(n))
	return n, err
}

func (c countingReader) Close() error { return c.r.Close() }

// addBytes counts n bytes moved through h's upstream: in the bytes metric,
// and for the leader, which the next renewal or the release tells.
func (g *Gateway) addBytes(direction string, h *holding, n int64) {
	g.cfg.Metrics.AddGatewayBytes(direction, h.proxy.Namespace, h.pool, n)
	h.transferred.Add(n)
}

// flushWriter flushes after every write, so that streamed responses stream.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	_ = http.NewResponseController(f.w).Flush()
	return n, err
}
