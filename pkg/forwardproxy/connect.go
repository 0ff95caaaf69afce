package forwardproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// serveConnect opens a tunnel to r.Host.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	target := r.Host
	if !validAuthority(target) {
		w.Header().Set("Connection", "close")
		http.Error(w, "400 CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	t := s.registerTunnel(r.Context())
	if t == nil {
		w.Header().Set("Connection", "close")
		http.Error(w, "503 proxy shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.unregisterTunnel(t)

	upstream, err := s.dial(t.ctx, "tcp", target)
	if err != nil {
		w.Header().Set("Connection", "close")
		code := upstreamError(w, err)
		s.log.V(2).Info("CONNECT failed", "target", target, "client", r.RemoteAddr, "status", code, "err", err)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		s.log.Error(err, "CONNECT: cannot hijack client connection", "target", target)
		http.Error(w, "500 cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	if !t.attach(client, upstream) {
		return // closed by Shutdown/Close meanwhile
	}
	// Deadlines set by the http.Server survive the hijack; the tunnel
	// manages its own.
	_ = client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, s.established(r)); err != nil {
		t.close()
		return
	}
	// Bytes the client sent right behind the CONNECT (a pipelined TLS
	// ClientHello) may already sit in the server's read buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		pending, _ := brw.Reader.Peek(n)
		_ = upstream.SetWriteDeadline(time.Now().Add(s.cfg.IdleTimeout))
		if _, err := upstream.Write(pending); err != nil {
			t.close()
			return
		}
		t.up.Add(int64(n))
	}
	err = t.run()
	kv := []any{"target", target, "client", r.RemoteAddr, "sent", t.up.Load(), "received", t.down.Load(),
		"duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		kv = append(kv, "err", err)
	}
	s.log.V(3).Info("Tunnel closed", kv...)
}

// established is the answer that opens a tunnel; to the operator's own
// credentials it names the lease keys.
func (s *Server) established(r *http.Request) string {
	if announced, _ := r.Context().Value(announceKey{}).(bool); announced {
		return "HTTP/1.1 200 Connection Established\r\n" + LeaseKeysHeader + ": " + s.keyIDs + "\r\n\r\n"
	}
	return "HTTP/1.1 200 Connection Established\r\n\r\n"
}

func validAuthority(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p > 0
}

// registerTunnel records a tunnel so that Shutdown waits for it; nil when
// shutting down.
func (s *Server) registerTunnel(parent context.Context) *tunnel {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown {
		return nil
	}
	t := &tunnel{idle: s.cfg.IdleTimeout}
	t.ctx, t.cancel = context.WithCancel(parent)
	t.touch()
	s.tunnels[t] = struct{}{}
	s.tunnelWG.Add(1)
	return t
}

func (s *Server) unregisterTunnel(t *tunnel) {
	t.close()
	s.mu.Lock()
	delete(s.tunnels, t)
	s.mu.Unlock()
	s.tunnelWG.Done()
}

func (s *Server) closeTunnels() {
	s.mu.Lock()
	ts := make([]*tunnel, 0, len(s.tunnels))
	for t := range s.tunnels {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
}

// tunnel is one CONNECT: a client and an upstream connection and the copy
// between them.
type tunnel struct {
	ctx    context.Context // cancelled by close: aborts the dial
	cancel context.CancelFunc
	idle   time.Duration

	last     atomic.Int64 // UnixNano of the latest traffic in either direction
	up, down atomic.Int64 // bytes client→target, target→client

	mu       sync.Mutex
	closed   bool
	client   net.Conn
	upstream net.Conn
}

// attach hands the connections to the tunnel; false (and both closed) when
// the tunnel was closed before.
func (t *tunnel) attach(client, upstream net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		client.Close()
		upstream.Close()
		return false
	}
	t.client, t.upstream = client, upstream
	return true
}

// close closes both connections; safe to call more than once.
func (t *tunnel) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	t.cancel()
	if t.client != nil {
		t.client.Close()
	}
	if t.upstream != nil {
		t.upstream.Close()
	}
}

func (t *tunnel) touch() { t.last.Store(time.Now().UnixNano()) }

func (t *tunnel) idleDeadline() time.Time { return time.Unix(0, t.last.Load()).Add(t.idle) }

// run copies in both directions until both are done, an error occurs, or
// the tunnel is idle for t.idle. It returns the first error that is not a
// normal end.
func (t *tunnel) run() error {
	errc := make(chan error, 1)
	go func() { errc <- t.pipe(t.upstream, t.client, &t.up) }()
	err1 := t.pipe(t.client, t.upstream, &t.down)
	err2 := <-errc
	t.close()
	return errors.Join(err1, err2)
}

// pipe copies src to dst. On EOF it half-closes dst and returns nil, so that
// the other direction can finish; on any other error it closes the tunnel.
func (t *tunnel) pipe(dst, src net.Conn, n *atomic.Int64) error {
	buf := make([]byte, 32<<10)
	for {
		_ = src.SetReadDeadline(t.idleDeadline())
		nr, rerr := src.Read(buf)
		if nr > 0 {
			t.touch()
			_ = dst.SetWriteDeadline(time.Now().Add(t.idle))
			nw, werr := dst.Write(buf[:nr])
			n.Add(int64(nw))
			if werr != nil {
				t.close()
				return t.classify(werr)
			}
			t.touch()
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF):
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return nil
		case errors.Is(rerr, os.ErrDeadlineExceeded) && time.Now().Before(t.idleDeadline()):
			// The other direction was active meanwhile: not idle.
		default:
			t.close()
			return t.classify(rerr)
		}
	}
}

var errTunnelIdle = errors.New("tunnel idle timeout")

// classify turns the errors of an orderly close into nil and a deadline
// into errTunnelIdle.
func (t *tunnel) classify(err error) error {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errTunnelIdle
	case closed && errors.Is(err, net.ErrClosed):
		return nil
	}
	return err
}
