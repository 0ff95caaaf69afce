package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"k8s.io/klog/v2"
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
// upstream. Rotating mode leases per request. A request the upstream never
// answered (it could not be reached) or answered 407 (our credentials for
// it are wrong) is tried once through the next proxy when its body can be
// sent again.
func (g *Gateway) servePlain(w http.ResponseWriter, r *http.Request, c caller) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, "this is a proxy: send absolute-form http:// requests, or CONNECT for anything else", 0)
		return
	}
	if r.URL.Scheme != "http" {
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("plain requests must be http://, got %q: use CONNECT for https (the gateway never decrypts)", truncate(r.URL.Scheme)), 0)
		return
	}
	logger := klog.FromContext(r.Context())
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = false
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // the transport must not add Go's own
	}
	replayable := r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0
	if r.ContentLength == 0 {
		out.Body = nil
	}

	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		u, err := g.take(r.Context(), c, domainOf(r.URL.Host))
		if err != nil {
			if attempt == 0 {
				g.acquireError(w, r, err)
				return
			}
			break
		}
		resp, err := g.roundTrip(out, u)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
			resp.Body.Close()
			err = fmt.Errorf("%w: the upstream rejected its credentials (407)", errRefused)
		}
		if err != nil {
			if r.Context().Err() != nil {
				u.done()
				return
			}
			lastErr = fmt.Errorf("proxy %s: %w", u.h.proxy, err)
			logger.V(2).Info("Upstream failed a plain request; releasing it with outcome error", "proxy", u.h.proxy, "host", r.URL.Host, "attempt", attempt+1, "err", err)
			u.refused()
			if !replayable {
				break
			}
			continue
		}
		g.cfg.Metrics.ObserveGatewayConnection(u.mode, r.Method)
		g.cfg.Metrics.AddGatewayActive(1)
		g.copyResponse(w, resp, u.h)
		g.cfg.Metrics.AddGatewayActive(-1)
		u.done()
		return
	}
	g.fail(w, r, http.StatusBadGateway, ReasonUpstreamRefused, fmt.Sprintf("the upstream failed the request: %v", lastErr), 0)
}

func (g *Gateway) roundTrip(out *http.Request, u *use) (*http.Response, error) {
	req := out.WithContext(context.WithValue(out.Context(), upstreamKey{}, u.h.upstream))
	if out.Body != nil {
		req.Body = countingReader{out.Body, g.cfg.Metrics, u.h}
	}
	resp, err := g.transport.RoundTrip(req)
	if err != nil {
		// Go's proxy errors can quote the proxy URL; keep credentials out.
		return nil, errors.New(redact(err.Error(), u.h.upstream))
	}
	return resp, nil
}

func (g *Gateway) copyResponse(w http.ResponseWriter, resp *http.Response, h *holding) {
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(flushWriter{w}, resp.Body)
	g.cfg.Metrics.AddGatewayBytes(DirectionDown, h.proxy.Namespace, h.pool, n)
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

type countingReader struct {
	r io.ReadCloser
	m Metrics
	h *holding
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.m.AddGatewayBytes(DirectionUp, c.h.proxy.Namespace, c.h.pool, int64(n))
	return n, err
}

func (c countingReader) Close() error { return c.r.Close() }

// flushWriter flushes after every write, so that streamed responses stream.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	_ = http.NewResponseController(f.w).Flush()
	return n, err
}
