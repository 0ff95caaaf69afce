package proxytest

import (
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Echo is what a target's /echo handler answers, as JSON: the request as the
// target received it.
type Echo struct {
	Method     string
	RequestURI string
	Host       string
	Proto      string
	Header     http.Header
}

// TargetHandler serves the targets' paths:
//
//	/generate_204  204 No Content (what health checks fetch)
//	/echo          200 with the received request as an Echo in JSON
func TargetHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/generate_204", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Echo{
			Method:     r.Method,
			RequestURI: r.RequestURI,
			Host:       r.Host,
			Proto:      r.Proto,
			Header:     r.Header,
		})
	})
	return mux
}

// StartHTTPTarget starts a plain HTTP target on 127.0.0.1 serving
// TargetHandler, closed on cleanup.
func StartHTTPTarget(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(TargetHandler())
	srv.Listener.Close()
	srv.Listener = listenLoopback(t, "")
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// StartHTTPSTarget starts an HTTPS target on 127.0.0.1 serving
// TargetHandler, closed on cleanup. Trust it with RootCAs(srv).
func StartHTTPSTarget(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(TargetHandler())
	srv.Listener.Close()
	srv.Listener = listenLoopback(t, "")
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// RootCAs returns a pool that trusts an httptest TLS server's certificate
// (valid for 127.0.0.1).
func RootCAs(srv *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}

// ClosedAddr returns a 127.0.0.1 address where connections are refused,
// for "target down" cases. On Linux the port stays reserved (bound, not
// listening) until cleanup, so no other process can start listening there
// meanwhile; elsewhere it is a port that was just bound and released.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	if port, ok := reserveClosedPort(t); ok {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return freeAddr(t)
}

// freeAddr returns a 127.0.0.1 address that was free a moment ago, to hand
// to a process that binds it itself (racy: callers retry).
func freeAddr(t testing.TB) string {
	t.Helper()
	l := listenLoopback(t, "")
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Port returns the port of a host:port address as an int.
func Port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("proxytest: port of %q: %v", addr, err)
	}
	return n
}

func listenLoopback(t testing.TB, ip string) net.Listener {
	t.Helper()
	if ip == "" {
		ip = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("proxytest: listen on %s: %v", ip, err)
	}
	return l
}
