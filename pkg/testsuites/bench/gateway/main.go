// Command bench measures the gateway against the forward proxy it chains
// to, side by side in one run on loopback (make bench writes the table into
// docs/benchmarks.md): new CONNECT tunnels per second, each carrying one
// request and its answer, by 64 concurrent clients, straight to the
// forward proxy versus through the gateway (rotating mode: a lease acquired
// and released per tunnel, with a username to parse and credentials to
// add); bulk bytes per second through 64 established tunnels; and the
// latency per tunnel and request. It asserts nothing.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
)

func main() {
	clients := flag.Int("clients", 64, "concurrent clients")
	duration := flag.Duration("duration", 5*time.Second, "how long each measurement runs")
	flag.Parse()
	if err := run(*clients, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// startEcho answers each "ping\n" with "pong\n"; startSource writes bytes
// until the client goes away.
func startTargets() (echo, source string, err error) {
	el, err := listen()
	if err != nil {
		return "", "", err
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
		return "", "", err
	}
	buf := make([]byte, 256<<10)
	go acceptLoop(sl, func(c net.Conn) {
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	return el.Addr().String(), sl.Addr().String(), nil
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

type result struct {
	perSecond float64
	p50, p99  time.Duration
	errors    int64
}

// newTunnels: each client opens a tunnel, sends one request, reads the
// answer, closes; again until the time is up.
func newTunnels(proxy, target, auth string, clients int, d time.Duration) result {
	return newTunnelsWith(proxy, target, auth, clients, d, func(c net.Conn, br *bufio.Reader) error {
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		_, err := br.ReadString('\n')
		return err
	})
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

func newTunnelsWith(proxy, target, auth string, clients int, d time.Duration, exchange func(net.Conn, *bufio.Reader) error) result {
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
	r := result{perSecond: float64(len(all)) / d.Seconds(), errors: errs.Load()}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

// bulk: each client opens one tunnel to the source and reads for d.
func bulk(proxy, target, auth string, clients int, d time.Duration) (float64, error) {
	var wg sync.WaitGroup
	var total atomic.Int64
	var firstErr error
	var mu sync.Mutex
	conns := make([]net.Conn, 0, clients)
	readers := make([]*bufio.Reader, 0, clients)
	for range clients {
		c, br, err := tunnel(proxy, target, auth)
		if err != nil {
			return 0, err
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
	for _, c := range conns {
		c.Close()
	}
	return float64(total.Load()) / time.Since(start).Seconds(), firstErr
}

func run(clients int, d time.Duration) error {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	echo, source, err := startTargets()
	if err != nil {
		return err
	}
	// The upstream: forward-proxy with basic auth, as a Pod instance runs it.
	fp, err := forwardproxy.New(forwardproxy.Config{Username: "fleet", Password: "bench-secret", Logger: klog.Background().V(10), AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		return err
	}
	fl, err := listen()
	if err != nil {
		return err
	}
	go fp.Serve(fl)
	upstream := fl.Addr().String()

	store, err := lease.NewStore(lease.Config{Key: []byte("gateway-bench-key-of-32-bytes-ok")})
	if err != nil {
		return err
	}
	store.Upsert(lease.ProxyInfo{Key: cache.ObjectName{Namespace: "bench", Name: "fp"}, UID: "fp", Ready: true,
		URL: "http://" + upstream, MaxLeases: int32(clients) * 2, ReadySince: time.Now()})
	auth := lease.NoAuth{}
	srv, err := lease.NewServer(lease.ServerConfig{Store: store, Authenticator: auth, Authorizer: auth, Watermark: &lease.MemoryWatermark{},
		Credentials: func(context.Context, cache.ObjectName) (*lease.Credentials, error) {
			return &lease.Credentials{Username: "fleet", Password: "bench-secret"}, nil
		}})
	if err != nil {
		return err
	}
	if err := srv.StartLeading(ctx); err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{Leases: gateway.FromServer(srv), Authenticator: auth, Authorizer: auth, AuthNone: true})
	if err != nil {
		return err
	}
	gl, err := listen()
	if err != nil {
		return err
	}
	go gw.Serve(ctx, gl)
	gateway := gl.Addr().String()

	upstreamAuth := base64.StdEncoding.EncodeToString([]byte("fleet:bench-secret"))
	gatewayAuth := base64.StdEncoding.EncodeToString([]byte("ns-bench:none"))
	fmt.Printf("gateway benchmark: %s, GOMAXPROCS %d, %d clients, %v per measurement, all on loopback in one process\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), clients, d)

	// Warm up both paths, then measure each twice, alternating, and keep the better.
	newTunnels(upstream, echo, upstreamAuth, clients, time.Second)
	newTunnels(gateway, echo, gatewayAuth, clients, time.Second)
	var direct, through result
	for range 2 {
		if r := newTunnels(upstream, echo, upstreamAuth, clients, d); r.perSecond > direct.perSecond {
			direct = r
		}
		if r := newTunnels(gateway, echo, gatewayAuth, clients, d); r.perSecond > through.perSecond {
			through = r
		}
	}
	https := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	https.Listener.Close()
	if https.Listener, err = listen(); err != nil {
		return err
	}
	https.Config.ErrorLog = log.New(io.Discard, "", 0)
	https.StartTLS()
	defer https.Close()
	httpsTarget := https.Listener.Addr().String()
	newTunnelsWith(gateway, httpsTarget, gatewayAuth, clients, time.Second, httpsExchange)
	var directTLS, throughTLS result
	for range 2 {
		if r := newTunnelsWith(upstream, httpsTarget, upstreamAuth, clients, d, httpsExchange); r.perSecond > directTLS.perSecond {
			directTLS = r
		}
		if r := newTunnelsWith(gateway, httpsTarget, gatewayAuth, clients, d, httpsExchange); r.perSecond > throughTLS.perSecond {
			throughTLS = r
		}
	}
	var bulkDirect, bulkThrough float64
	for range 2 {
		b, err := bulk(upstream, source, upstreamAuth, clients, d)
		if err != nil {
			return fmt.Errorf("bulk, direct: %w", err)
		}
		bulkDirect = max(bulkDirect, b)
		if b, err = bulk(gateway, source, gatewayAuth, clients, d); err != nil {
			return fmt.Errorf("bulk, through the gateway: %w", err)
		}
		bulkThrough = max(bulkThrough, b)
	}
	// Tunnels release their leases as their copies end, just after the close.
	var left []lease.Lease
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(10 * time.Millisecond) {
		if left, _ = store.List(lease.LeaseFilter{}); len(left) == 0 {
			break
		}
	}

	fmt.Println("| measurement | straight to forward-proxy | through the gateway | ratio | target |")
	fmt.Println("|---|---:|---:|---:|---:|")
	fmt.Printf("| new CONNECT tunnels/s (one request each) | %.0f | %.0f | %.2f× | ≥ 0.8× |\n", direct.perSecond, through.perSecond, through.perSecond/direct.perSecond)
	fmt.Printf("| bulk through established tunnels | %.0f MiB/s | %.0f MiB/s | %.2f× | ≥ 0.9× |\n", bulkDirect/(1<<20), bulkThrough/(1<<20), bulkThrough/bulkDirect)
	fmt.Printf("| new CONNECT tunnels/s (TLS handshake + one HTTPS GET each) | %.0f | %.0f | %.2f× | ≥ 0.8× |\n", directTLS.perSecond, throughTLS.perSecond, throughTLS.perSecond/directTLS.perSecond)
	fmt.Printf("| tunnel + request latency p50 | %v | %v | +%v | reported |\n", direct.p50.Round(time.Microsecond), through.p50.Round(time.Microsecond), (through.p50 - direct.p50).Round(time.Microsecond))
	fmt.Printf("| tunnel + request latency p99 | %v | %v | +%v | reported |\n", direct.p99.Round(time.Microsecond), through.p99.Round(time.Microsecond), (through.p99 - direct.p99).Round(time.Microsecond))
	fmt.Printf("| tunnel + TLS + GET latency p50 | %v | %v | +%v | reported |\n", directTLS.p50.Round(time.Microsecond), throughTLS.p50.Round(time.Microsecond), (throughTLS.p50 - directTLS.p50).Round(time.Microsecond))
	fmt.Printf("| tunnel + TLS + GET latency p99 | %v | %v | +%v | reported |\n", directTLS.p99.Round(time.Microsecond), throughTLS.p99.Round(time.Microsecond), (throughTLS.p99 - directTLS.p99).Round(time.Microsecond))
	fmt.Printf("| failed tunnels | %d | %d | | 0 |\n", direct.errors+directTLS.errors, through.errors+throughTLS.errors)
	fmt.Printf("\nLeases left behind by the gateway's rotating mode after the run: %d.\n", len(left))
	cancel()
	return nil
}
