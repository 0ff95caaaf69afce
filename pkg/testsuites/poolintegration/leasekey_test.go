package poolintegration_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// Issue 63: a lease is a key. The real operator, its lease API and its
// pushes, our forward-proxy as the instance (a local process, or what a
// cloud fake boots from the user-data), a real echo target for tunnels,
// and the Go client and the gateway as holders. Each bound below is the
// one the docs promise (push.Bound), measured from the release or the
// lease's expiry; the figures are logged.

// TestALeaseIsAKeyOnALocalProxy: on a Managed local Proxy, a 10-minute
// lease released after 5 s gets 407 within the bound, and its tunnel and
// kept-alive connection are closed; a lease left to expire likewise; the
// Go client (Hold) and the gateway keep working across 5 renewals with
// never a 407 and their tunnels open.
func TestALeaseIsAKeyOnALocalProxy(t *testing.T) {
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	echo := startEcho(t)
	pt.create(newPool("keyed", 1, target.URL))
	k := pt.keyTest(t, "keyed", target.URL, echo)
	k.releasedAfterFiveSeconds()
	k.leftToExpire()
	k.renewingHolder()
	k.throughTheGateway(pt.startGateway("--gateway-lease-ttl=5s"))
}

// TestALeaseIsAKeyOnABootedCloudInstance: the same on a hetzner server of
// the cloud fake, which boots our forward-proxy from the operator's
// user-data (its port, credentials and lease key): the key reaches a VM
// outside the cluster the way its password does, and the pushes the way
// the probes do.
func TestALeaseIsAKeyOnABootedCloudInstance(t *testing.T) {
	fake := hcloudtest.New(t, hcloudtest.WithSteps(1),
		hcloudtest.WithPublicIP(func(n int) string { return fmt.Sprintf("127.0.105.%d", n) }),
		hcloudtest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir(), env: fake.Env()}
	pt.ns = operatortest.NewNamespace(t, kube)
	pt.createSecret("hcloud-token", map[string]string{"token": hcloudtest.Token})
	pt.flags = []string{"--providers=hetzner", "--hetzner-location=fsn1", "--hetzner-cluster-id=keys", "--hetzner-token-secret=" + pt.ns + "/hcloud-token"}
	pt.start()
	target := proxytest.StartHTTPTarget(t)
	echo := startEcho(t)
	pt.create(newPool("vm", 1, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.Provider = crawlv1alpha1.ProviderHetzner
		p.Spec.Template.Spec.Hetzner = &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}}
	}))
	k := pt.keyTest(t, "vm", target.URL, echo)
	k.releasedAfterFiveSeconds()
	k.leftToExpire()
}

// keyTest waits for the pool's one member to be Ready and LeaseBound, and
// returns the leases to hold on it.
func (pt *poolTest) keyTest(t *testing.T, pool, target, echo string) keyTest {
	t.Helper()
	addr := pt.leaseBound(t, pool)
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	return keyTest{t: t, lc: lc, ns: pt.ns, proxy: addr, echo: echo, target: target}
}

// leaseBound waits for the pool's one member to be Ready with LeaseBound
// True (its probe found the instance checks the Secret's key) and returns
// its address.
func (pt *poolTest) leaseBound(t *testing.T, pool string) string {
	t.Helper()
	var addr string
	eventually.Check(t, 2*time.Minute, interval, "a Ready member whose instance checks lease credentials", func(ctx context.Context) error {
		ms, err := pt.members(ctx, pool)
		if err != nil || len(ms) != 1 {
			return fmt.Errorf("%d members (%v)", len(ms), err)
		}
		m := ms[0]
		bound := meta.FindStatusCondition(m.Status.Conditions, crawlv1alpha1.ConditionLeaseBound)
		if m.Status.Phase != crawlv1alpha1.PhaseReady || bound == nil || bound.Status != metav1.ConditionTrue {
			return fmt.Errorf("member %s: phase %s, LeaseBound %+v", m.Name, m.Status.Phase, bound)
		}
		addr = net.JoinHostPort(m.Status.IP, fmt.Sprint(m.Status.Port))
		return nil
	})
	return addr
}

// keyTest is one proxy's leases, held the ways a crawler holds them.
type keyTest struct {
	t               *testing.T
	lc              *client.Client
	ns, proxy, echo string
	target          string // http://host:port of a target answering /generate_204
}

func (k *keyTest) acquire(ttl time.Duration) *client.Lease {
	k.t.Helper()
	l, err := k.lc.Acquire(k.t.Context(), client.AcquireRequest{Holder: "key-test", Namespace: k.ns, TTL: ttl, Wait: 30 * time.Second})
	if err != nil {
		k.t.Fatal(err)
	}
	if l.Credentials == nil {
		k.t.Fatal("the grant carries no credentials")
	}
	return l
}

// held is what a holder has open under a lease: a tunnel to the echo
// target and a kept-alive connection that fetched through the proxy.
type held struct {
	tunnel, keptAlive *rawConn
}

func (k *keyTest) open(c *client.Credentials) held {
	k.t.Helper()
	tunnel, code, err := dialConnect(k.t, k.proxy, k.echo, c.Username, c.Password)
	if err != nil || code != http.StatusOK {
		k.t.Fatalf("CONNECT with the lease's credentials: %d %v", code, err)
	}
	if err := tunnel.ping("before"); err != nil {
		k.t.Fatal(err)
	}
	keptAlive, err := dialRaw(k.t, k.proxy)
	if err != nil {
		k.t.Fatal(err)
	}
	if code, err := keptAlive.get(k.target, c.Username, c.Password); err != nil || code != http.StatusNoContent {
		k.t.Fatalf("GET on the kept-alive connection: %d %v", code, err)
	}
	return held{tunnel: tunnel, keptAlive: keptAlive}
}

// fresh is the status a new connection with c gets.
func (k *keyTest) fresh(c *client.Credentials) int {
	conn, err := dialRaw(k.t, k.proxy)
	if err != nil {
		return 0
	}
	defer conn.Close()
	code, err := conn.get(k.target, c.Username, c.Password)
	if err != nil {
		return 0
	}
	return code
}

// ended waits for the lease's credentials to be refused and its
// connections closed, and returns when each happened after since.
func (k *keyTest) ended(c *client.Credentials, h held, since time.Time) (refused, tunnelClosed, keptAliveClosed time.Duration) {
	k.t.Helper()
	eventually.Check(k.t, 30*time.Second, 20*time.Millisecond, "the lease's credentials refused and its connections closed", func(context.Context) error {
		// Each observation is timed when it is made: a refused request
		// takes a round trip, a closed connection a read.
		if refused == 0 && k.fresh(c) == http.StatusProxyAuthRequired {
			refused = time.Since(since)
		}
		if tunnelClosed == 0 && h.tunnel.closed() {
			tunnelClosed = time.Since(since)
		}
		if keptAliveClosed == 0 && h.keptAlive.closed() {
			keptAliveClosed = time.Since(since)
		}
		if refused == 0 || tunnelClosed == 0 || keptAliveClosed == 0 {
			return fmt.Errorf("after %v: refused at %v, tunnel closed at %v, kept-alive closed at %v", time.Since(since), refused, tunnelClosed, keptAliveClosed)
		}
		return nil
	})
	for what, d := range map[string]time.Duration{"407": refused, "tunnel closed": tunnelClosed, "kept-alive closed": keptAliveClosed} {
		if d > push.Bound {
			k.t.Errorf("%s %v after, beyond the bound %v", what, d.Round(time.Millisecond), push.Bound)
		}
	}
	return refused, tunnelClosed, keptAliveClosed
}

// releasedAfterFiveSeconds: a 10-minute lease, used for 5 s, released.
func (k *keyTest) releasedAfterFiveSeconds() {
	k.t.Helper()
	l := k.acquire(10 * time.Minute)
	h := k.open(l.Credentials)
	start := time.Now()
	// Five seconds of use: the tunnel echoes and fresh requests pass.
	eventually.Check(k.t, 30*time.Second, 250*time.Millisecond, "5 s of use under the lease", func(context.Context) error {
		if err := h.tunnel.ping("alive"); err != nil {
			return fmt.Errorf("%w: the tunnel failed while the lease lives: %v", eventually.ErrHopeless, err)
		}
		if code := k.fresh(l.Credentials); code != http.StatusNoContent {
			return fmt.Errorf("%w: a request with the live lease's credentials got %d", eventually.ErrHopeless, code)
		}
		if time.Since(start) < 5*time.Second {
			return errors.New("still using it")
		}
		return nil
	})
	if err := k.lc.Release(k.t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
		k.t.Fatal(err)
	}
	released := time.Now()
	refused, tunnel, kept := k.ended(l.Credentials, h, released)
	k.t.Logf("released after 5 s of a 10m lease: 407 after %v, tunnel closed after %v, kept-alive connection closed after %v (bound %v)",
		refused.Round(time.Millisecond), tunnel.Round(time.Millisecond), kept.Round(time.Millisecond), push.Bound)
}

// leftToExpire: a 5 s lease, never renewed.
func (k *keyTest) leftToExpire() {
	k.t.Helper()
	l := k.acquire(5 * time.Second)
	h := k.open(l.Credentials)
	eventually.Check(k.t, 30*time.Second, 100*time.Millisecond, "use until just before the expiry", func(context.Context) error {
		if time.Until(l.ExpiresAt) > 300*time.Millisecond {
			if code := k.fresh(l.Credentials); code != http.StatusNoContent {
				return fmt.Errorf("%w: a request with the live lease's credentials got %d", eventually.ErrHopeless, code)
			}
			return errors.New("still live")
		}
		return nil
	})
	refused, tunnel, kept := k.ended(l.Credentials, h, l.ExpiresAt)
	k.t.Logf("left to expire: 407 %v after the expiry, tunnel closed %v after, kept-alive connection closed %v after (bound %v)",
		refused.Round(time.Millisecond), tunnel.Round(time.Millisecond), kept.Round(time.Millisecond), push.Bound)
}

// renewingHolder: the Go client's Hold with a 5 s TTL (a renewal every
// 1.7 s) through a Transport built once: never a 407 across 5 renewals,
// and a tunnel opened with the grant's credentials stays open.
func (k *keyTest) renewingHolder() {
	k.t.Helper()
	var problems []string
	renewals := 0
	err := k.lc.Hold(k.t.Context(), client.AcquireRequest{Holder: "renewing", Namespace: k.ns, TTL: 5 * time.Second}, func(ctx context.Context, l client.Lease) error {
		first, _ := l.ProxyURL()
		pass, _ := first.User.Password()
		tunnel, code, err := dialConnect(k.t, k.proxy, k.echo, first.User.Username(), pass)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("CONNECT: %d %v", code, err)
		}
		transport := &http.Transport{Proxy: l.ProxyFunc()}
		defer transport.CloseIdleConnections()
		httpc := &http.Client{Transport: transport, Timeout: 5 * time.Second}
		seen := map[string]bool{}
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return eventually.Poll(waitCtx, 100*time.Millisecond, func(context.Context) error {
			u, _ := l.ProxyURL()
			p, _ := u.User.Password()
			seen[p] = true
			resp, err := httpc.Get(k.target + "/generate_204")
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					problems = append(problems, fmt.Sprintf("GET through the held proxy: %d", resp.StatusCode))
				}
			}
			if err := tunnel.ping("held"); err != nil {
				problems = append(problems, "the tunnel opened with the grant's credentials: "+err.Error())
				return fmt.Errorf("%w: %v", eventually.ErrHopeless, problems)
			}
			if len(seen) < 6 {
				return fmt.Errorf("%d credentials seen", len(seen))
			}
			renewals = len(seen) - 1
			return nil
		})
	})
	if err != nil || len(problems) > 0 {
		k.t.Fatalf("holding across renewals: %v; problems %v", err, problems)
	}
	k.t.Logf("Hold: %d renewals, each with fresh credentials, no 407, the first tunnel open throughout", renewals)
}

// throughTheGateway: a gateway session (its lease renewed at half its 5 s
// TTL) carries a tunnel and new requests across 5 renewals with never a
// refusal.
func (k *keyTest) throughTheGateway(gateway string) {
	k.t.Helper()
	user := "ns-" + k.ns + "+session-renewing"
	tunnel, code, err := dialConnect(k.t, gateway, k.echo, user, "any")
	if err != nil || code != http.StatusOK {
		k.t.Fatalf("CONNECT through the gateway: %d %v", code, err)
	}
	transport := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: gateway, User: url.UserPassword(user, "any")})}
	defer transport.CloseIdleConnections()
	httpc := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	ends := map[time.Time]bool{}
	var problems []string
	eventually.Check(k.t, 2*time.Minute, 200*time.Millisecond, "5 renewals of the gateway session's lease", func(ctx context.Context) error {
		if err := tunnel.ping("via gateway"); err != nil {
			return fmt.Errorf("%w: the session's tunnel: %v", eventually.ErrHopeless, err)
		}
		resp, err := httpc.Get(k.target + "/generate_204")
		if err != nil {
			problems = append(problems, err.Error())
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				problems = append(problems, fmt.Sprintf("GET through the gateway: %d %s", resp.StatusCode, resp.Header.Get("Proxy-Status")))
			}
		}
		leases, err := k.lc.Leases(ctx, client.LeasesFilter{Namespace: k.ns})
		if err != nil {
			return err
		}
		for _, l := range leases {
			if l.Session == "renewing" {
				ends[l.ExpiresAt] = true
			}
		}
		if len(ends) < 6 {
			return fmt.Errorf("%d ends of the session's lease seen", len(ends))
		}
		return nil
	})
	if len(problems) > 0 {
		k.t.Errorf("through the gateway across renewals: %v", problems)
	}
	k.t.Logf("gateway: %d renewals of the session's lease, no refusal, its tunnel open throughout", len(ends)-1)
}

// rawConn is a client connection to a proxy, read through a buffer.
type rawConn struct {
	net.Conn
	r  *bufio.Reader
	mu sync.Mutex
}

// dialRaw connects to addr; the connection is closed on cleanup. It may be
// called from any goroutine.
func dialRaw(t *testing.T, addr string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}, nil
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// dialConnect opens a tunnel to target through proxy; on 200 the
// connection is the tunnel. It may be called from any goroutine.
func dialConnect(t *testing.T, proxy, target, user, pass string) (*rawConn, int, error) {
	c, err := dialRaw(t, proxy)
	if err != nil {
		return nil, 0, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", target, target, basicAuth(user, pass))
	resp, err := http.ReadResponse(c.r, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, 0, fmt.Errorf("CONNECT %s through %s: %w", target, proxy, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, resp.StatusCode, nil
}

// get fetches target's /generate_204 on the connection, kept alive.
func (c *rawConn) get(target, user, pass string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	host := strings.TrimPrefix(target, "http://")
	fmt.Fprintf(c, "GET %s/generate_204 HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", target, host, basicAuth(user, pass))
	resp, err := http.ReadResponse(c.r, &http.Request{Method: http.MethodGet})
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// ping writes msg into a tunnel to the echo target and reads it back.
func (c *rawConn) ping(msg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echoed %q, want %q", buf, msg)
	}
	return nil
}

// closed reports whether the proxy closed the connection: a read ends
// with something other than a timeout.
func (c *rawConn) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.r.Peek(1)
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// startEcho is a TCP target on loopback that echoes what it reads.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}
