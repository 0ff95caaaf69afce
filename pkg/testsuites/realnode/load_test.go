//go:build realnode

package realnode

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the failover and upgrade steps measure under: crawlers' lease calls
// through the leases Service, and a tunnel through the gateway Service.

// loadNamespace holds the proxy the lease load acquires, apart from the
// crawl namespace, whose acquires without a selector other steps count on
// finding nothing free.
const (
	loadNamespace = "load"
	loadProxy     = "load"
	// acquireEvery is how often the load sends an acquire, each on its own
	// connection (kube-proxy picks a replica per connection), whether or not
	// the ones before have been answered: the resolution of a first grant.
	acquireEvery = 50 * time.Millisecond
	// maxInFlight bounds the acquires waiting for an answer at once (a
	// forwarded call waits out an election, up to 10 s).
	maxInFlight = 64
)

// startLoadProxy makes the load's namespace, a Proxy there that takes many
// leases at once, and the crawler's right to lease in it, and waits until
// the Proxy is Ready.
func (s *suite) startLoadProxy(t *testing.T) {
	t.Helper()
	s.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: crawler, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: proxy-operator-crawler}
subjects: [{kind: ServiceAccount, name: crawler, namespace: %[2]s}]
---
apiVersion: crawl.proxyfleet.io/v1alpha1
kind: Proxy
metadata: {name: %[3]s, namespace: %[1]s}
spec:
  mode: Managed
  provider: kubernetes
  maxLeases: 32
  kubernetes: {port: 3128}
  egress: {allowCIDRs: ["%[4]s/32"]}
  healthCheck: {url: "%[5]s", expectedStatus: 200, interval: 3s, timeout: 2s}
`, loadNamespace, crawlNamespace, loadProxy, s.echoIP, "http://"+net.JoinHostPort(s.echoIP, "8080")+"/"))
	waitFor(t, 2*time.Minute, "Proxy "+loadNamespace+"/"+loadProxy+" Ready", func(ctx context.Context) error {
		p, err := s.crawl.CrawlV1alpha1().Proxies(loadNamespace).Get(ctx, loadProxy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != "Ready" {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		return nil
	})
}

// removeLoadProxy deletes the load's Proxy while the operator runs (its
// finalizer deletes the Pod), then the namespace.
func (s *suite) removeLoadProxy(t *testing.T) {
	t.Helper()
	s.run(t, "kubectl", "delete", "proxies", "--all", "-n", loadNamespace, "--timeout=90s")
	s.run(t, "kubectl", "delete", "namespace", loadNamespace, "--timeout=90s")
}

// answer is one lease call of the load, as the client saw it.
type answer struct {
	op             string // "acquire", "renew"
	sent, answered time.Time
	code           int    // 0: no HTTP answer (err)
	errCode        string // the JSON error's code
	err            error
}

func (a answer) String() string {
	switch {
	case a.code == 0:
		return a.op + ": no answer"
	case a.errCode != "":
		return fmt.Sprintf("%s: %d %s", a.op, a.code, a.errCode)
	}
	return fmt.Sprintf("%s: %d", a.op, a.code)
}

// leaseLoad sends an acquire through the leases Service every
// acquireEvery, releases what it is granted, and renews one held lease
// every 100 ms, recording every answer.
type leaseLoad struct {
	url, token, leaseID string
	client              *http.Client
	cancel              context.CancelFunc
	wg                  sync.WaitGroup

	mu      sync.Mutex
	answers []answer
	skipped int // ticks with maxInFlight acquires unanswered
}

func (s *suite) startLeaseLoad(t *testing.T) *leaseLoad {
	t.Helper()
	l := &leaseLoad{
		url: "http://" + s.serviceAddr(t, "proxy-operator-leases", 8080), token: s.token, leaseID: s.leaseID,
		// A connection per call, so that kube-proxy spreads them over the
		// replicas as it does a fleet of crawlers.
		client: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Go(func() { l.acquireLoop(ctx) })
	l.wg.Go(func() { l.renewLoop(ctx) })
	t.Cleanup(l.stop)
	return l
}

// stop ends the load and waits for its calls.
func (l *leaseLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *leaseLoad) acquireLoop(ctx context.Context) {
	slots := make(chan struct{}, maxInFlight)
	tick := time.NewTicker(acquireEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.wg.Go(func() {
			defer func() { <-slots }()
			a, id := l.call(ctx, "acquire", http.MethodPost, "/v1/leases",
				fmt.Sprintf(`{"holder":"e2e-load","namespace":%q,"ttl":"15s"}`, loadNamespace))
			l.record(ctx, a)
			if id != "" {
				l.release(ctx, id)
			}
		})
	}
}

// release gives a lease back, again on a transport error (the replica
// went away), as a careful crawler does.
func (l *leaseLoad) release(ctx context.Context, id string) {
	for range 10 {
		a, _ := l.call(ctx, "release", http.MethodDelete, "/v1/leases/"+id+"?outcome=ok", "")
		if a.code != 0 || ctx.Err() != nil {
			return
		}
	}
}

func (l *leaseLoad) renewLoop(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a, _ := l.call(ctx, "renew", http.MethodPost, "/v1/leases/"+l.leaseID+"/renew", `{"ttl":"5m"}`)
		l.record(ctx, a)
	}
}

// call sends one lease API call and returns its answer, and the lease ID
// of a 201.
func (l *leaseLoad) call(ctx context.Context, op, method, path, body string) (answer, string) {
	a := answer{op: op, sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, method, l.url+path, strings.NewReader(body))
	if err != nil {
		a.err = err
		return a, ""
	}
	req.Header.Set("Authorization", "Bearer "+l.token)
	resp, err := l.client.Do(req)
	a.answered = time.Now()
	if err != nil {
		a.err = err
		return a, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	a.code = resp.StatusCode
	var parsed struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &parsed)
	a.errCode = parsed.Error.Code
	if a.code == http.StatusCreated {
		return a, parsed.ID
	}
	return a, ""
}

// record keeps a, unless the load was stopping (its calls end unanswered).
func (l *leaseLoad) record(ctx context.Context, a answer) {
	if ctx.Err() != nil || a.answered.IsZero() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = append(l.answers, a)
}

// first is the first answer with code to an op sent at or after t,
// ordered by when it was answered.
func (l *leaseLoad) first(op string, code int, t time.Time) (answer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best answer
	found := false
	for _, a := range l.answers {
		if a.op == op && a.code == code && !a.sent.Before(t) && (!found || a.answered.Before(best.answered)) {
			best, found = a, true
		}
	}
	return best, found
}

// tally counts the answers to calls sent in [from, to) by kind.
func (l *leaseLoad) tally(from, to time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, a := range l.answers {
		if !a.sent.Before(from) && a.sent.Before(to) {
			out[a.String()]++
		}
	}
	return out
}

// count is how many answers in [from, to) have errCode.
func (l *leaseLoad) count(errCode string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers {
		if a.errCode == errCode && !a.sent.Before(from) && a.sent.Before(to) {
			n++
		}
	}
	return n
}

// longestGap is the longest time in [from, to) between two grants answered.
func (l *leaseLoad) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	var at []time.Time
	for _, a := range l.answers {
		if a.op == "acquire" && a.code == http.StatusCreated && !a.answered.Before(from) && a.answered.Before(to) {
			at = append(at, a.answered)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	at = append(append([]time.Time{from}, at...), to)
	var gap time.Duration
	for i := 1; i < len(at); i++ {
		gap = max(gap, at[i].Sub(at[i-1]))
	}
	return gap
}

func formatTally(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s ×%d; ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// tunnel is a CONNECT tunnel through the gateway Service and the load's
// proxy to the target, over which a request goes every 200 ms: a cut is an
// error on it.
type tunnel struct {
	cancel   context.CancelFunc
	done     chan struct{}
	requests int
	err      error
	at       time.Time // when err happened
}

func (s *suite) openTunnel(t *testing.T) *tunnel {
	t.Helper()
	gateway := s.serviceAddr(t, "proxy-operator-gateway", 3128)
	target := net.JoinHostPort(s.echoIP, "8080")
	conn, err := net.DialTimeout("tcp", gateway, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("ns-" + loadNamespace + ":" + s.token))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth)
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		conn.Close()
		t.Fatalf("CONNECT %s through the gateway %s: %v %v", target, gateway, resp, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tu := &tunnel{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tu.done)
		defer conn.Close()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target); err != nil {
				tu.err, tu.at = err, time.Now()
				return
			}
			resp, err := http.ReadResponse(r, nil)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
			if err != nil {
				tu.err, tu.at = err, time.Now()
				return
			}
			tu.requests++
		}
	}()
	t.Cleanup(func() { tu.close() })
	return tu
}

// close ends the tunnel's requests and returns how many went through and
// the error that cut it, if one did.
func (tu *tunnel) close() (int, error) {
	tu.cancel()
	<-tu.done
	return tu.requests, tu.err
}
