package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The load: the bench's clients and the origins they reach, all in this
// process (the reference and the gateway share them).

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// origins are the tunnels' targets: echo answers each "ping\n" with
// "pong\n", source writes bytes until the client goes away, tls answers
// GET with 204 over TLS, health is the operator's probe target.
type origins struct {
	echo, source, tls, health string
	closers                   []func()
}

func startOrigins() (*origins, error) {
	o := &origins{}
	el, err := listen()
	if err != nil {
		return nil, err
	}
	go acceptLoop(el, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			if _, err := io.WriteString(c, "pong\n"); err != nil {
				return
			}
		}
	})
	sl, err := listen()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 256<<10)
	go acceptLoop(sl, func(c net.Conn) {
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	o.echo, o.source = el.Addr().String(), sl.Addr().String()
	o.closers = append(o.closers, func() { el.Close() }, func() { sl.Close() })

	noContent := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	https := httptest.NewUnstartedServer(noContent)
	https.Listener.Close()
	if https.Listener, err = listen(); err != nil {
		return nil, err
	}
	https.Config.ErrorLog = log.New(io.Discard, "", 0)
	https.StartTLS()
	o.tls = https.Listener.Addr().String()
	health := httptest.NewServer(noContent)
	o.health = health.URL + "/generate_204"
	o.closers = append(o.closers, https.Close, health.Close)
	return o, nil
}

func (o *origins) close() {
	for _, c := range o.closers {
		c()
	}
}

func acceptLoop(l net.Listener, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

// tunnel opens a CONNECT tunnel to target through proxy.
func tunnel(proxy, target, auth string) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, nil, err
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: Basic " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT answered %s", resp.Status)
	}
	return c, br, nil
}

// result is one measurement of one path.
type result struct {
	// perSecond is tunnels per second, or bytes per second for bulk.
	perSecond float64
	p50, p99  time.Duration
	errors    int64
	// count is the tunnels made (for bulk: the bytes read).
	count float64
	cpu   cpuSpent
}

// pingExchange is the smallest use of a tunnel: one request, its answer.
func pingExchange(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	_, err := br.ReadString('\n')
	return err
}

// httpsExchange is a crawler's use of a new tunnel: a full TLS handshake
// with the target, one GET, its answer.
func httpsExchange(c net.Conn, _ *bufio.Reader) error {
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "bench.example"}) //nolint:gosec // a loopback bench target
	if _, err := io.WriteString(tc, "GET /generate_204 HTTP/1.1\r\nHost: bench.example\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("target answered %s", resp.Status)
	}
	return nil
}

// newTunnels: each client opens a tunnel, runs exchange, closes; again
// until the time is up.
func newTunnels(proxy, target, auth string, clients int, d time.Duration, exchange func(net.Conn, *bufio.Reader) error) result {
	var wg sync.WaitGroup
	var errs atomic.Int64
	lat := make([][]time.Duration, clients)
	deadline := time.Now().Add(d)
	for i := range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				start := time.Now()
				c, br, err := tunnel(proxy, target, auth)
				if err == nil {
					err = exchange(c, br)
					c.Close()
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{perSecond: float64(len(all)) / d.Seconds(), errors: errs.Load(), count: float64(len(all))}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

// bulk: each client opens one tunnel to the source and reads for d.
func bulk(proxy, target, auth string, clients int, d time.Duration) (result, error) {
	var wg sync.WaitGroup
	var total atomic.Int64
	var firstErr error
	var mu sync.Mutex
	conns := make([]net.Conn, 0, clients)
	readers := make([]*bufio.Reader, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, br, err := tunnel(proxy, target, auth)
		if err != nil {
			return result{}, err
		}
		conns, readers = append(conns, c), append(readers, br)
	}
	start := time.Now()
	deadline := start.Add(d)
	for i := range conns {
		wg.Go(func() {
			_ = conns[i].SetReadDeadline(deadline)
			buf := make([]byte, 256<<10)
			for {
				n, err := readers[i].Read(buf)
				total.Add(int64(n))
				if err != nil {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					return
				}
			}
		})
	}
	wg.Wait()
	n := float64(total.Load())
	return result{perSecond: n / time.Since(start).Seconds(), count: n}, firstErr
}
