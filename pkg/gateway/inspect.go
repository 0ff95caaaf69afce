package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// Inspection (TLS interception), for the namespaces that opted in
// (docs/inspection.md): the gateway answers the crawler's CONNECT itself,
// completes the crawler's TLS handshake with a leaf certificate of the
// namespace's CA, reads each HTTP request, and sends it on through a
// leased upstream's tunnel over TLS it verifies against the target's
// certificate (never downgraded: a target whose certificate does not
// verify is answered 502, nothing sent to it). The responses go through
// forward, so they are judged and retried as plain HTTP is. Only port 443
// is inspected (Config.InspectedPorts), and only a connection that starts
// a TLS handshake: any other is tunnelled as ever.

// Minters gives the leaf certificates of a namespace that opted into
// inspection, and nil for one that did not.
type Minters interface {
	Minter(namespace string) *inspection.Minter
}

// defaultInspectedPort is the only port whose CONNECTs are inspected
// unless Config.InspectedPorts says otherwise (tests).
const defaultInspectedPort = "443"

// helloTimeout bounds waiting for the crawler's first bytes (and its TLS
// handshake) after the gateway answered its CONNECT.
const helloTimeout = 10 * time.Second

// minterFor is the Minter of the caller's namespace when authority is to
// be inspected, else nil. A caller without an ns- term names no namespace,
// and so is never inspected.
func (g *Gateway) minterFor(c caller, authority string) *inspection.Minter {
	if g.cfg.Inspection == nil || c.target.Namespace == "" {
		return nil
	}
	if _, port, _ := net.SplitHostPort(authority); !slices.Contains(g.cfg.InspectedPorts, port) {
		return nil
	}
	return g.cfg.Inspection.Minter(c.target.Namespace)
}

// serveInspected answers the CONNECT, and then either inspects the TLS
// the crawler starts or tunnels whatever else it sends.
func (g *Gateway) serveInspected(w http.ResponseWriter, r *http.Request, c caller, m *inspection.Minter, authority string) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		g.fail(w, r, http.StatusInternalServerError, ReasonUpstreamFailed, "cannot tunnel on this connection", 0)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		client.Close()
		return
	}
	conn := &bufferedConn{Conn: client, r: brw.Reader}
	_ = client.SetReadDeadline(time.Now().Add(helloTimeout))
	first, err := conn.r.Peek(1)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil || first[0] != 0x16 { // 0x16: a TLS handshake record
		g.tunnelAfterAnswer(r.Context(), conn, c, authority)
		return
	}
	host, _, _ := net.SplitHostPort(authority)
	tlsConn := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		// The leaf is for the CONNECT's host, whatever the SNI says: that
		// is the host requests go to, and the one leased for.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return m.Leaf(host) },
	})
	ctx, cancel := context.WithTimeout(r.Context(), helloTimeout)
	err = tlsConn.HandshakeContext(ctx)
	cancel()
	if err != nil {
		klog.FromContext(r.Context()).V(3).Info("Inspected TLS handshake failed", "target", authority, "client", r.RemoteAddr, "err", err)
		client.Close()
		return
	}
	if !g.trackTunnel(client) {
		return
	}
	defer g.untrackTunnel(client)
	g.serveRequests(r.Context(), tlsConn, c, authority)
}

// serveRequests serves the HTTP/1.1 requests the crawler sends on an
// inspected connection, each forwarded to https://authority, until the
// connection closes.
func (g *Gateway) serveRequests(ctx context.Context, conn net.Conn, c caller, authority string) {
	ln := &oneConn{conn: conn}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !namesAuthority(r.Host, authority) {
				// The lease, the budget, the cool-downs and the ban rules
				// all follow the CONNECT's host: a request for another
				// would be one site crawled on another's account.
				g.fail(w, r, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf(
					"this tunnel is to %s, so the Host header must name %s, got %q: open a CONNECT to that host for it",
					authority, hostOf(authority), truncate(r.Host)), 0)
				return
			}
			r.URL.Scheme, r.URL.Host = "https", authority
			g.forward(w, r, c)
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// The connection is the listener's only one: once it is done, so
		// is the listener, and Serve returns.
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.Close()
			}
		},
	}
	_ = srv.Serve(ln)
}

// namesAuthority says whether a request's Host (its header, or the host
// of an absolute-form target) names the CONNECT's authority: the same
// host, either case, a trailing dot aside, and the same port if it names
// one. No Host at all (HTTP/1.0) goes to the authority.
func namesAuthority(host, authority string) bool {
	if host == "" {
		return true
	}
	wantHost, wantPort, _ := net.SplitHostPort(authority)
	gotHost, gotPort, err := net.SplitHostPort(host)
	if err != nil {
		gotHost, gotPort = host, ""
	}
	norm := func(h string) string { return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".") }
	return norm(gotHost) == norm(wantHost) && (gotPort == "" || gotPort == wantPort)
}

// hostOf is authority's host.
func hostOf(authority string) string {
	host, _, _ := net.SplitHostPort(authority)
	return host
}

// tunnelAfterAnswer tunnels a CONNECT the gateway has answered already
// (it waited to see whether the crawler speaks TLS): an upstream that
// cannot be had now closes the connection, the only answer left.
func (g *Gateway) tunnelAfterAnswer(ctx context.Context, client *bufferedConn, c caller, authority string) {
	u, upstream, pending, err := g.openTunnel(ctx, c, authority)
	if u == nil {
		klog.FromContext(ctx).V(2).Info("No upstream for an answered CONNECT; closing it", "target", authority, "err", err)
		client.Close()
		return
	}
	var early []byte
	if n := client.r.Buffered(); n > 0 {
		early, _ = client.r.Peek(n)
	}
	g.tunnel(ctx, client.Conn, upstream, u, pending, early, authority)
}

// bufferedConn is a hijacked connection whose first bytes wait in r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read drains r, then reads the connection itself. r reads through the
// outer server's connection reader, which cancels the CONNECT's context
// on any read error, the deadline the inner server sets to end a
// background read included; every later request on a kept-alive
// inspected connection would then start canceled.
func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p[:min(len(p), c.r.Buffered())])
	}
	return c.Conn.Read(p)
}

// oneConn is a listener that accepts conn once, then blocks until closed.
type oneConn struct {
	mu     sync.Mutex
	conn   net.Conn
	closed chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	conn := l.conn
	l.conn = nil
	if l.closed == nil {
		l.closed = make(chan struct{})
	}
	closed := l.closed
	l.mu.Unlock()
	if conn != nil {
		return conn, nil
	}
	<-closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed == nil {
		l.closed = make(chan struct{})
	}
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *oneConn) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "inspected" }
