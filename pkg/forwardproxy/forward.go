package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"time"
)

// hopByHop lists the hop-by-hop headers (RFC 9110 §7.6.1 plus the
// historical ones) that a proxy must not forward.
var hopByHop = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers from h, and the headers named
// by the Connection header values conn (taken from the received message).
func removeHopByHop(h http.Header, conn []string) {
	for _, v := range conn {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// serveForward forwards an absolute-form request.
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request) {
	if r.URL.Scheme != "http" {
		http.Error(w, "400 only http:// URIs are forwarded; use CONNECT for https", http.StatusBadRequest)
		return
	}
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	s.rp.ServeHTTP(rec, r)
	s.log.V(3).Info("Forwarded", "method", r.Method, "host", r.URL.Host, "client", r.RemoteAddr,
		"status", rec.status, "duration", time.Since(start).Round(time.Millisecond))
}

// rewrite turns the inbound request into the outbound one. ReverseProxy has
// already cloned it, removed the standard hop-by-hop headers and the
// client's X-Forwarded-*/Forwarded headers; this undoes the parts of
// ReverseProxy that suit a reverse proxy but not a forward one.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	// ReverseProxy drops query parameters it cannot parse; a forward proxy
	// does not edit URLs.
	out.URL.RawQuery = in.URL.RawQuery
	// ReverseProxy re-adds Connection/Upgrade for protocol upgrades and
	// "Te: trailers"; none of them is forwarded here.
	removeHopByHop(out.Header, in.Header["Connection"])
	out.Host = in.Host

	appendVia(out.Header, in.ProtoMajor, in.ProtoMinor, s.cfg.Name)

	if s.cfg.XForwardedFor {
		if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
			if prior := in.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				ip = strings.Join(prior, ", ") + ", " + ip
			}
			out.Header.Set("X-Forwarded-For", ip)
		}
	}
}

// modifyResponse adds Via to the response; ReverseProxy has removed the
// standard hop-by-hop headers already.
func (s *Server) modifyResponse(res *http.Response) error {
	appendVia(res.Header, res.ProtoMajor, res.ProtoMinor, s.cfg.Name)
	if announced, _ := res.Request.Context().Value(announceKey{}).(bool); announced {
		res.Header.Set(LeaseKeysHeader, s.keyIDs)
	}
	return nil
}

func appendVia(h http.Header, major, minor int, name string) {
	if major == 0 {
		major, minor = 1, 1
	}
	via := fmt.Sprintf("%d.%d %s", major, minor, name)
	if prior := h.Values("Via"); len(prior) > 0 {
		via = strings.Join(prior, ", ") + ", " + via
	}
	h.Set("Via", via)
}

// forwardError answers a request whose target could not be reached.
func (s *Server) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	code := upstreamError(w, err)
	s.log.V(2).Info("Forwarding failed", "method", r.Method, "host", r.URL.Host, "client", r.RemoteAddr, "status", code, "err", err)
}

// statusRecorder remembers the final status code for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if code >= 200 && r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush and friends.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
