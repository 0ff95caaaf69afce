package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The peer port: one TLS listener that requires a client certificate of
// the peers' CA, carrying two protocols told apart by ALPN: Raft's own
// (protoRaft) and HTTP/2 (the forwarded lease calls).

const (
	protoRaft = "proxy-operator-raft"
	protoH2   = "h2"
	// handshakeTimeout bounds a peer's TLS handshake.
	handshakeTimeout = 5 * time.Second
)

// peerListener accepts the peer port's connections and hands each to the
// protocol its ALPN names.
type peerListener struct {
	ln        net.Listener
	advertise net.Addr
	raftConns chan net.Conn
	h2Conns   chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

// listenPeers listens on addr (advertised to the peers as advertise) with
// tlsConfig, which must require and verify client certificates.
func listenPeers(addr, advertise string, tlsConfig *tls.Config) (*peerListener, error) {
	cfg := tlsConfig.Clone()
	cfg.NextProtos = []string{protoRaft, protoH2}
	ln, err := tls.Listen("tcp", addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("peer port: %w", err)
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("peer address %q: %w", advertise, err)
	}
	pl := &peerListener{ln: ln, advertise: adv, raftConns: make(chan net.Conn), h2Conns: make(chan net.Conn), closed: make(chan struct{})}
	go pl.accept()
	return pl, nil
}

func (pl *peerListener) accept() {
	for {
		c, err := pl.ln.Accept()
		if err != nil {
			pl.Close()
			return
		}
		go pl.route(c.(*tls.Conn))
	}
}

// route completes c's handshake and queues it for its protocol.
func (pl *peerListener) route(c *tls.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		c.Close()
		return
	}
	out := pl.h2Conns
	if c.ConnectionState().NegotiatedProtocol == protoRaft {
		out = pl.raftConns
	}
	select {
	case out <- c:
	case <-pl.closed:
		c.Close()
	}
}

// Close stops accepting; the connections already handed out stay theirs.
func (pl *peerListener) Close() error {
	var err error
	pl.closeOnce.Do(func() {
		close(pl.closed)
		err = pl.ln.Close()
	})
	return err
}

// protoListener is the peer listener's connections of one protocol.
type protoListener struct {
	pl    *peerListener
	conns chan net.Conn
}

func (l protoListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.pl.closed:
		return nil, net.ErrClosed
	}
}

func (l protoListener) Close() error   { return l.pl.Close() }
func (l protoListener) Addr() net.Addr { return l.pl.advertise }

// streamLayer is Raft's transport over the peer port.
type streamLayer struct {
	protoListener
	tlsConfig *tls.Config
	dialFrom  *net.TCPAddr
}

func newStreamLayer(pl *peerListener, tlsConfig *tls.Config, dialFrom *net.TCPAddr) *streamLayer {
	cfg := tlsConfig.Clone()
	cfg.NextProtos = []string{protoRaft}
	return &streamLayer{protoListener: protoListener{pl: pl, conns: pl.raftConns}, tlsConfig: cfg, dialFrom: dialFrom}
}

// dialFrom is where a replica's dials to its peers come from: the peer
// port's own IP when it listens on one (not on every address), so that
// its peers see one address per replica, whichever of them dials; nil
// (the system's choice) otherwise. A filter on that address then cuts
// the replica from its peers both ways (the partition tests).
func dialFrom(listen string) *net.TCPAddr {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil
	}
	return &net.TCPAddr{IP: ip}
}

// Dial opens a Raft connection to a peer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, LocalAddr: s.dialFrom}, Config: s.tlsConfig}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != protoRaft {
		c.Close()
		return nil, fmt.Errorf("peer %s speaks %q, not %q", address, p, protoRaft)
	}
	return c, nil
}

// servePeerHTTP serves h over the peer port's HTTP/2 connections until
// the listener closes.
func servePeerHTTP(pl *peerListener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: handshakeTimeout}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP2(true)
	err := srv.Serve(protoListener{pl: pl, conns: pl.h2Conns})
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// peerClient is an HTTP/2 client of the peers' port: one persistent,
// authenticated connection per peer, dialled from from (nil: the system's
// choice).
func peerClient(tlsConfig *tls.Config, from *net.TCPAddr) *http.Client {
	cfg := tlsConfig.Clone()
	cfg.NextProtos = []string{protoH2}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, IdleConnTimeout: 5 * time.Minute,
		TLSHandshakeTimeout: handshakeTimeout, DialContext: (&net.Dialer{LocalAddr: from}).DialContext}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	return &http.Client{Transport: tr}
}
