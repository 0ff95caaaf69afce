package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// copyChunk is how many bytes one splice(2) round moves before the bytes
// metric and the session's activity are updated.
const copyChunk = 4 << 20

// answerReaders read upstreams' CONNECT answers: a few hundred bytes each,
// so one pooled reader per tunnel being set up instead of 4 KiB per tunnel.
var answerReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// connectRequest tells http.ReadResponse that the answer is to a CONNECT
// (a 2xx has no body); it only reads the Method.
var connectRequest = &http.Request{Method: http.MethodConnect}

// errRefused: the upstream answered CONNECT with something other than 2xx,
// or could not be reached, before any byte of the tunnel flowed.
var errRefused = errors.New("upstream refused")

// serveConnect opens a tunnel to r.Host through a leased upstream: CONNECT
// to the upstream with its own credentials, then bytes both ways, never
// read. An upstream that refuses is released with outcome error and the
// next one tried, once. In a namespace that opted into inspection, a
// CONNECT to port 443 is inspected instead (inspect.go).
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, c caller) {
	authority := r.Host
	if !validAuthority(authority) {
		g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("CONNECT needs host:port, got %q", truncate(authority)), 0)
		return
	}
	if m := g.minterFor(c, authority); m != nil {
		g.serveInspected(w, r, c, m, authority)
		return
	}
	u, upstream, pending, err := g.openTunnel(r.Context(), c, authority)
	if u == nil {
		if errors.Is(err, errRefused) {
			g.fail(w, r, http.StatusBadGateway, ReasonUpstreamRefused, fmt.Sprintf("the upstream refused the tunnel (and so did the next one tried): %v", err), 0)
		} else {
			g.acquireError(w, r, err)
		}
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		u.done()
		g.fail(w, r, http.StatusInternalServerError, ReasonUpstreamFailed, "cannot tunnel on this connection", 0)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		client.Close()
		upstream.Close()
		u.done()
		return
	}
	var early []byte
	if n := brw.Reader.Buffered(); n > 0 { // what the client sent right behind its CONNECT
		early, _ = brw.Reader.Peek(n)
	}
	g.tunnel(r.Context(), client, upstream, u, pending, early, authority)
}

// openTunnel takes a lease for authority's domain and asks its upstream
// for a tunnel there, trying the next proxy once if the upstream refuses.
// On success it returns the use, the upstream connection and the bytes
// the upstream sent behind its answer; on failure a nil use and the error
// (errRefused when upstreams refused, else the acquire's).
func (g *Gateway) openTunnel(ctx context.Context, c caller, authority string) (*use, net.Conn, []byte, error) {
	logger := klog.FromContext(ctx)
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		u, err := g.take(ctx, c, domainOf(authority))
		if err != nil {
			if attempt == 0 {
				return nil, nil, nil, err
			}
			break // the refusal is the better answer
		}
		upstream, pending, err := g.dialConnect(ctx, u.h.upstream(), authority)
		if err == nil {
			return u, upstream, pending, nil
		}
		logger.V(2).Info("Upstream refused CONNECT; releasing it with outcome error", "proxy", u.h.proxy, "target", authority, "attempt", attempt+1, "err", err)
		lastErr = fmt.Errorf("proxy %s: %w", u.h.proxy, err)
		u.refused()
	}
	return nil, nil, nil, lastErr
}

// tunnel splices an answered CONNECT's client connection to its upstream
// until both ends close, and then gives the use back. pending is what the
// upstream sent behind its answer, early what the client sent behind its
// request.
func (g *Gateway) tunnel(ctx context.Context, client, upstream net.Conn, u *use, pending, early []byte, authority string) {
	if !g.trackTunnel(client, upstream) {
		u.done()
		return
	}
	defer g.untrackTunnel(client, upstream)
	// Runs before untrackTunnel: a shutdown waits for a tunnel until its
	// lease is given back, or the process could exit mid-release.
	defer u.done()
	g.cfg.Metrics.ObserveGatewayConnection(u.mode, http.MethodConnect)
	g.cfg.Metrics.AddGatewayActive(1)
	defer g.cfg.Metrics.AddGatewayActive(-1)

	_ = client.SetDeadline(time.Time{})
	if len(pending) > 0 {
		if _, err := client.Write(pending); err != nil {
			return
		}
		g.addBytes(DirectionDown, u.h, int64(len(pending)))
	}
	if len(early) > 0 {
		if _, err := upstream.Write(early); err != nil {
			return
		}
		g.addBytes(DirectionUp, u.h, int64(len(early)))
	}
	g.splice(client, upstream, u.h)
	if v := klog.FromContext(ctx).V(4); v.Enabled() { // the arguments would escape even when not logged
		v.Info("Tunnel closed", "proxy", u.h.proxy, "target", authority, "mode", u.mode)
	}
}

// dialConnect dials the upstream proxy and asks it for a tunnel to
// authority with the upstream's own credentials. It returns the connection
// and any bytes read past the upstream's answer.
func (g *Gateway) dialConnect(ctx context.Context, upstream *url.URL, authority string) (net.Conn, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	addr := upstream.Host
	if upstream.Port() == "" {
		port := "80"
		if upstream.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(upstream.Hostname(), port)
	}
	conn, err := g.cfg.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: dial: %w", errRefused, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if upstream.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: upstream.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("%w: TLS to the proxy: %w", errRefused, err)
		}
		conn = tc
	}
	req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if upstream.User != nil {
		pass, _ := upstream.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(upstream.User.Username()+":"+pass)) + "\r\n"
	}
	req += "\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: writing CONNECT: %w", errRefused, err)
	}
	br := answerReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil) // drop conn before the reader goes back to the pool
		answerReaders.Put(br)
	}()
	resp, err := http.ReadResponse(br, connectRequest)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: reading the CONNECT answer: %w", errRefused, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		conn.Close()
		// Only the status: the upstream's headers and body are its own business.
		return nil, nil, fmt.Errorf("%w: CONNECT answered %s", errRefused, resp.Status)
	}
	var pending []byte
	if n := br.Buffered(); n > 0 {
		pending, _ = br.Peek(n)
		pending = append([]byte(nil), pending...) // the reader is reused
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, pending, nil
}

// splice copies both ways until both directions end; a direction that ends
// half-closes its destination where it can, so that request-then-EOF
// protocols work. The downstream direction runs on the calling (the
// connection's) goroutine: one goroutine per tunnel, not two.
func (g *Gateway) splice(client, upstream net.Conn, h *holding) {
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		g.pipe(upstream, client, DirectionUp, h)
	}()
	g.pipe(client, upstream, DirectionDown, h)
	<-upDone
}

// pipe copies src to dst until src ends, then half-closes dst; the bytes
// count for h's pool.
func (g *Gateway) pipe(dst, src net.Conn, direction string, h *holding) {
	for {
		// io.CopyN over a *net.TCPConn pair is splice(2): the bytes never
		// enter this process's memory (net.TCPConn.ReadFrom unwraps the
		// *io.LimitedReader; any other wrapper would defeat it).
		n, err := io.CopyN(dst, src, copyChunk)
		if n > 0 {
			g.addBytes(direction, h, n)
		}
		if err != nil {
			break
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func validAuthority(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return false
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// trackTunnel registers a hijacked tunnel's connections (or an inspected
// crawler's) so that Serve can close them at shutdown; false when shutdown
// has begun (they are closed then).
func (g *Gateway) trackTunnel(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		g.tunnels[c] = struct{}{}
	}
	g.tunnelsWG.Add(1)
	return true
}

func (g *Gateway) untrackTunnel(conns ...net.Conn) {
	for _, c := range conns {
		c.Close()
	}
	g.mu.Lock()
	for _, c := range conns {
		delete(g.tunnels, c)
	}
	g.mu.Unlock()
	g.tunnelsWG.Done()
}
