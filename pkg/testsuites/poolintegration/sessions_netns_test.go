package poolintegration_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/netnstest"
)

// The shared instance's network: a ULA /64 routed from the target's
// namespace to the proxy's, as a cloud routes a delegated prefix.
const (
	sessExitRange = "fd00:5e55:54::/64"
	sessLink      = "fd00:5e55:55::/64"
	sessProxyIP   = "fd00:5e55:55::1"
	sessTargetIP  = "fd00:5e55:55::2"
	sessProxyAddr = "127.0.0.1:3128" // in the proxy's namespace
	sessUser      = "crawler"
	sessPassword  = "instance-pw-5e55"
)

// sessionRig is our forward-proxy with --exit-range in one namespace, a
// target recording source addresses in another, and a relay from this
// namespace's loopback to the proxy: the operator runs here, beside the
// API server, and reaches the instance through it.
type sessionRig struct {
	proxyNS, targetNS *netnstest.Namespace
	relay             string // host:port on this namespace's loopback
	target            string // http://[ip]:port
	mu                sync.Mutex
	seen              map[string]bool
}

// startSessionRig starts the rig; the forward-proxy checks lease
// credentials signed with leaseKey (the instance's key, which the test puts
// in the instance's credentials Secret as an External proxy's owner does).
func startSessionRig(t *testing.T, forwardProxy, leaseKey string) *sessionRig {
	netnstest.Needs(t)
	rig := &sessionRig{proxyNS: netnstest.New(t, "sessproxy"), targetNS: netnstest.New(t, "sesstarget"), seen: map[string]bool{}}
	netnstest.Veth(t, rig.proxyNS, "px0", rig.targetNS, "tg0")
	rig.proxyNS.IP(t, "-6", "addr", "add", sessProxyIP+"/64", "dev", "px0", "nodad")
	rig.targetNS.IP(t, "-6", "addr", "add", sessTargetIP+"/64", "dev", "tg0", "nodad")
	rig.targetNS.IP(t, "-6", "route", "add", sessExitRange, "via", sessProxyIP)
	rig.proxyNS.IP(t, "-6", "route", "add", "local", sessExitRange, "dev", "lo")

	var ln net.Listener
	if err := rig.targetNS.Do(func() (err error) { ln, err = net.Listen("tcp", "["+sessTargetIP+"]:0"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		rig.mu.Lock()
		rig.seen[host] = true
		rig.mu.Unlock()
		fmt.Fprint(w, host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	rig.target = "http://" + ln.Addr().String()

	// Our forward-proxy, as an instance's owner starts it (docs/ipv6.md).
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", rig.proxyNS.Name, forwardProxy,
		"--listen="+sessProxyAddr, "--exit-range="+sessExitRange, "--allow-cidr="+sessLink, "--dial-timeout=3s")
	cmd.Env = []string{"PROXY_USERNAME=" + sessUser, "PROXY_PASSWORD=" + sessPassword, "PROXY_LEASE_KEYS=" + leaseKey}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("forward-proxy output:\n%s", out.String())
		}
	})
	rig.relay = rig.startRelay(t)
	eventually.Check(t, 30*time.Second, interval, "the forward-proxy listens in "+rig.proxyNS.Name, func(context.Context) error {
		c, err := net.DialTimeout("tcp", rig.relay, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_, err = http.ReadResponse(bufio.NewReader(c), nil)
		return err
	})
	return rig
}

// startRelay copies connections to this namespace's loopback to the
// proxy's listener in its namespace.
func (rig *sessionRig) startRelay(t *testing.T) string {
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
				var up net.Conn
				if err := rig.proxyNS.Do(func() (err error) { up, err = net.DialTimeout("tcp", sessProxyAddr, 5*time.Second); return err }); err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

func (rig *sessionRig) saw(addr string) bool {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return rig.seen[addr]
}

// fetch asks the target, through the relay, as user, what source address
// it sees; it returns the status code and the body.
func (rig *sessionRig) fetch(t *testing.T, target, user, password string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", rig.relay, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	host := strings.TrimPrefix(target, "http://")
	fmt.Fprintf(c, "GET %s/ip HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", target, host, auth)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s as %s: %v", target, user, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// instanceCount is how many shared-instance Proxies the pool has.
func (pt *poolTest) instanceCount(ctx context.Context, pool string) (int, error) {
	uids, err := pt.instanceUIDs(ctx, pool)
	return len(uids), err
}

// instanceUIDs are the UIDs of the pool's shared-instance Proxies: the
// same UIDs before and after a recycle mean no instance was made.
func (pt *poolTest) instanceUIDs(ctx context.Context, pool string) ([]string, error) {
	list, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolInstanceLabel + "=" + pool})
	if err != nil {
		return nil, err
	}
	var uids []string
	for _, p := range list.Items {
		uids = append(uids, string(p.UID))
	}
	slices.Sort(uids)
	return uids, nil
}

// sessionsReady is nil once the pool has n Ready members on n distinct
// exit IPs of the range; it returns member name → exit IP.
func (pt *poolTest) sessionsReady(ctx context.Context, pool string, n int) (map[string]string, error) {
	if err := pt.settled(ctx, pool, n); err != nil {
		return nil, err
	}
	ips, err := pt.exitIPs(ctx, pool)
	if err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(sessExitRange)
	distinct := map[string]string{}
	for name, ip := range ips {
		a, err := netip.ParseAddr(ip)
		if err != nil || !prefix.Contains(a) {
			return nil, fmt.Errorf("member %s: exit IP %q is not in %s", name, ip, sessExitRange)
		}
		if other, dup := distinct[ip]; dup {
			return nil, fmt.Errorf("members %s and %s both leave from %s", other, name, ip)
		}
		distinct[ip] = name
	}
	return ips, nil
}

// TestSessionPoolOnOneRangedInstance: a pool of 64 members on one instance
// (membersPerInstance 64), our forward-proxy with a ULA /64 in a network
// namespace, declared as an External instance with spec.exitRanges and a
// lease key in its credentials Secret. The pool makes one instance Proxy
// and 64 sessions on it, with no Secret per session; the target sees 64
// distinct source addresses, each the exitIP of its member's status; a
// lease on a member leaves only from that member's exitIP, and its
// credentials with another member's id, a made-up id or no session term
// are refused (407), as are the instance's own credentials, and the
// lease's once it is released; a banned member is recycled into a new
// session and a new address without a new instance; the egress guard still
// refuses internal IPv6 destinations through a member's lease; and scaled
// to zero, the sessions go and then the instance.
func TestSessionPoolOnOneRangedInstance(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t, "--providers=session")
	leaseKey, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	rig := startSessionRig(t, filepath.Join(filepath.Dir(shared.Get(t).Binary), "forward-proxy"), leaseKey)
	pt.createCredentialsSecret("instance-auth", map[string]string{"username": sessUser, "password": sessPassword, leasecred.SecretKey: leaseKey})
	host, portText, _ := net.SplitHostPort(rig.relay)
	var port int32
	fmt.Sscan(portText, &port)
	hc := fastHealthCheck(rig.target)
	hc.URL, hc.ExpectedStatus, hc.ExitIPFromBody = rig.target+"/ip", 200, true
	pt.create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "v6"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas:           ptr.To[int32](64),
			MembersPerInstance: ptr.To[int32](64),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Mode:        crawlv1alpha1.ModeExternal,
				Endpoint:    &crawlv1alpha1.Endpoint{Host: host, Port: port},
				ExitRanges:  []crawlv1alpha1.CIDR{sessExitRange},
				Auth:        &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "instance-auth"}},
				HealthCheck: hc,
			}},
			Recycle: &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](1)},
		},
	})
	var ips map[string]string
	eventually.Check(t, 3*time.Minute, interval, "64 Ready sessions on 64 distinct addresses of "+sessExitRange, func(ctx context.Context) (err error) {
		ips, err = pt.sessionsReady(ctx, "v6", 64)
		return err
	})
	if n, err := pt.instanceCount(t.Context(), "v6"); err != nil || n != 1 {
		t.Fatalf("instance Proxies: %d (%v), want 1", n, err)
	}
	if generated, err := pt.kube.CoreV1().Secrets(pt.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "crawl.proxyfleet.io/generated-credentials-for"}); err != nil || len(generated.Items) != 0 {
		t.Errorf("generated credentials Secrets: %d (%v), want none: a session's derive from its instance's", len(generated.Items), err)
	}

	// The target saw each member's exit IP; every member is LeaseBound.
	ms, err := pt.members(t.Context(), "v6")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !rig.saw(m.Status.ExitIP) {
			t.Errorf("member %s: the target never saw its exit IP %s", m.Name, m.Status.ExitIP)
		}
		if !meta.IsStatusConditionTrue(m.Status.Conditions, crawlv1alpha1.ConditionLeaseBound) {
			t.Errorf("member %s is not LeaseBound: %+v", m.Name, meta.FindStatusCondition(m.Status.Conditions, crawlv1alpha1.ConditionLeaseBound))
		}
	}

	// A lease on each member: its credentials leave from its own exit IP,
	// and from nowhere else.
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]*client.Lease{}
	for range ms {
		l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "exits", Namespace: pt.ns, Selector: crawlv1alpha1.PoolLabel + "=v6", TTL: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		leases[l.Proxy.Name] = l
	}
	fetched := map[string]bool{}
	var a, b *client.Lease
	for name, l := range leases {
		c := l.Credentials
		if c == nil || !strings.HasPrefix(c.Username, sessUser+"+session-") || c.Password == sessPassword {
			t.Fatalf("lease on %s: credentials %v; want %s+session-<id> with a lease's password", name, c != nil, sessUser)
		}
		code, body := rig.fetch(t, rig.target, c.Username, c.Password)
		if code != http.StatusOK || body != ips[name] {
			t.Errorf("lease on %s: the target saw %d %q; status.exitIP is %s", name, code, body, ips[name])
		}
		fetched[body] = true
		if a == nil {
			a = l
		} else if b == nil {
			b = l
		}
	}
	if len(fetched) != 64 {
		t.Errorf("the target saw %d distinct source addresses for 64 leases; want 64", len(fetched))
	}
	for what, user := range map[string]string{
		"another member's id": b.Credentials.Username,
		"a made-up id":        sessUser + "+session-0000000000000000",
		"no session term":     sessUser,
		"its own id alone":    "session-" + strings.TrimPrefix(a.Credentials.Username, sessUser+"+session-"),
	} {
		if code, body := rig.fetch(t, rig.target, user, a.Credentials.Password); code != http.StatusProxyAuthRequired {
			t.Errorf("%s with %s's lease password: %d %q, want 407", what, a.Proxy.Name, code, body)
		}
	}
	for what, user := range map[string]string{"with a session term": a.Credentials.Username, "bare": sessUser} {
		if code, body := rig.fetch(t, rig.target, user, sessPassword); code != http.StatusProxyAuthRequired {
			t.Errorf("the instance's own password, %s: %d %q, want 407", what, code, body)
		}
	}
	// The egress guard: internal IPv6 destinations stay refused.
	for _, internal := range []string{"http://[::1]:80", "http://[fd00:77::1]:80", "http://[fd00:5e55:54::9]:80"} {
		if code, body := rig.fetch(t, internal, a.Credentials.Username, a.Credentials.Password); code != http.StatusForbidden {
			t.Errorf("through %s's lease to %s: %d %q; want 403 from the egress guard", a.Proxy.Name, internal, code, body)
		}
	}
	// Released, a lease's credentials are refused within the bound (the
	// push reaches the instance through the address its probes use).
	if err := lc.Release(t.Context(), a.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	eventually.Check(t, 30*time.Second, 20*time.Millisecond, "the released lease's credentials refused", func(context.Context) error {
		if code, _ := rig.fetch(t, rig.target, a.Credentials.Username, a.Credentials.Password); code != http.StatusProxyAuthRequired {
			return fmt.Errorf("still %d", code)
		}
		return nil
	})
	if d := time.Since(released); d > push.Bound {
		t.Errorf("the released lease's credentials refused %v after the release, beyond the bound %v", d, push.Bound)
	} else {
		t.Logf("a session's released lease refused %v after the release (bound %v)", d.Round(time.Millisecond), push.Bound)
	}
	for name, l := range leases {
		if l != a {
			if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
				t.Fatalf("releasing %s: %v", name, err)
			}
		}
	}

	// A ban recycles a member: a new session, a new address, no new instance.
	l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "banner", Namespace: pt.ns, Selector: crawlv1alpha1.PoolLabel + "=v6", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	banned, bannedIP := l.Proxy.Name, ips[l.Proxy.Name]
	instancesBefore, err := pt.instanceUIDs(t.Context(), "v6")
	if err != nil {
		t.Fatal(err)
	}
	bannedAt := time.Now()
	if err := lc.Release(t.Context(), l.ID, client.OutcomeBanned, "shop.example"); err != nil {
		t.Fatal(err)
	}
	before := ips
	eventually.Check(t, 2*time.Minute, interval, banned+" recycled into a new address", func(ctx context.Context) (err error) {
		if ips, err = pt.sessionsReady(ctx, "v6", 64); err != nil {
			return err
		}
		if _, still := ips[banned]; still {
			return fmt.Errorf("%s still a member", banned)
		}
		return nil
	})
	// How long the recycle took, beside the probe interval, for the record
	// (docs/ipv6.md); the bound above is only the test's patience.
	t.Logf("the banned %s was replaced by a Ready session on a new address %s after the ban (probe interval %s)",
		banned, time.Since(bannedAt).Round(100*time.Millisecond), hc.Interval.Duration)
	for name, ip := range ips {
		if _, old := before[name]; !old && ip == bannedIP {
			t.Errorf("the successor %s of the banned %s left from its address %s", name, banned, ip)
		}
	}
	if after, err := pt.instanceUIDs(t.Context(), "v6"); err != nil || !slices.Equal(after, instancesBefore) {
		t.Errorf("instance Proxies after the recycle: %v (%v), want the same one as before, %v", after, err, instancesBefore)
	}

	// Scaled to zero: the sessions go, then the instance nobody uses.
	pt.updatePool("v6", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](0) })
	eventually.Check(t, 2*time.Minute, interval, "no member and no instance left", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "v6")
		if err != nil {
			return err
		}
		n, err := pt.instanceCount(ctx, "v6")
		if err != nil {
			return err
		}
		if len(ms) != 0 || n != 0 {
			return fmt.Errorf("%d members, %d instances", len(ms), n)
		}
		return nil
	})
}
