package operator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// The lease workload of TestLeaseFailover.
const (
	// failoverFleet External Proxies with maxLeases 1, leased by more
	// workers than there are proxies, so that grants contend.
	failoverFleet   = 6
	failoverWorkers = 8
	// failoverLeaseTTL is what every acquire and renewal asks for: the
	// maximum, so that a lease granted just before the kill outlives the
	// takeover (lease duration 3s, plus up to two jittered retry periods,
	// about 5.2s at worst, plus the horizon claim) and its renewal on the
	// new leader is certain, not a race against a 5s expiry.
	failoverLeaseTTL = 10 * time.Second
	// acquireWait long-polls for capacity (and through the new leader's
	// recovery), so workers need no retry loop of their own for NoneFree.
	acquireWait = 2 * time.Second
	// leaderlessPause is how long a worker waits when neither replica leads.
	leaderlessPause = 100 * time.Millisecond
	// validityMargin: a renewal or release sent this long before the lease's
	// expiry must find the lease (allows for a loaded machine between the
	// send and the server's clock reading).
	validityMargin = time.Second
	// grantsBeforeKill and grantsAfterFailover size the two phases.
	grantsBeforeKill    = 20
	grantsAfterFailover = 20
)

// The operator's lease flags for this test: no auth, short TTLs.
var failoverLeaseFlags = []string{
	"--lease-auth=none",
	"--lease-min-ttl=1s",
	"--lease-default-ttl=5s",
	"--lease-max-ttl=10s",
}

// Two replicas serve the lease API; K workers acquire, hold, renew and
// release leases on real, health-checked proxies, through whichever replica
// leads. The leader is killed mid-workload (SIGKILL: no handover, no final
// horizon). The new leader must never grant a proxy twice, must accept
// renewals of the old leader's live leases, and must resume granting once
// the old leader's persisted horizon has passed.
func TestLeaseFailover(t *testing.T) { leaseFailover(t, false) }

// TestLeasePartition (issue 37): the same workload, but the leader is cut
// off from the API server by a packet filter instead of killed: it keeps
// running, serving the lease API, until it stops leading and exits. Every
// invariant above holds: no proxy held by two leases, the old leader's
// leases renewed on the new one, grants resumed after the old horizon.
func TestLeasePartition(t *testing.T) { leaseFailover(t, true) }

// leaseFailover runs TestLeaseFailover's workload; the leader is killed,
// or, when partitioned, cut off from the API server.
func leaseFailover(t *testing.T, partitioned bool) {
	ns := newNamespace(t)
	target := proxytest.StartHTTPTarget(t)
	for i := range failoverFleet {
		px := proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1})
		createLeasedProxy(t, failoverProxy(ns, "px-"+itoa(i), px.Addr, target.URL+"/generate_204"))
	}
	flags := append(slices.Clone(leaseTimings), failoverLeaseFlags...)
	var a, b *operatortest.Process
	partitions := map[*operatortest.Process]*operatortest.APIPartition{}
	if partitioned {
		for _, name := range []string{"a", "b"} {
			p := operatortest.NewAPIPartition(t, shared.Get(t).Env)
			op := operatortest.Start(t, operatortest.ProcessOptions{
				Binary: shared.Get(t).Binary, Name: name, Args: append(operatortest.NamespaceArgs(p.Kubeconfig, ns), flags...), LogsEnv: "OPERATOR_TEST_LOGS",
			})
			partitions[op] = p
		}
		for op := range partitions {
			if op.Name == "a" {
				a = op
			} else {
				b = op
			}
		}
	} else {
		a = startOperator(t, "a", ns, flags...)
		b = startOperator(t, "b", ns, flags...)
	}
	apis := []*leaseAPI{leaseAPIOf(t, a), leaseAPIOf(t, b)}
	w := &leaseWorkload{apis: apis, ns: ns}

	leader, _ := waitForLeader(t, startTimeout, a, b)
	// Ready through the real health engine, and known to the leader's store.
	eventually.Check(t, startTimeout, pollInterval, "every proxy leasable", func(ctx context.Context) error {
		var proxies []client.Proxy
		prefer := 0
		_, err := w.onLeader(ctx, &prefer, func(c *client.Client) error {
			var err error
			proxies, err = c.Proxies(ctx, ns, "")
			return err
		})
		if err != nil {
			return err
		}
		if len(proxies) != failoverFleet {
			return fmt.Errorf("%d Ready proxies, want %d", len(proxies), failoverFleet)
		}
		return nil
	})
	oldAPI, newAPI := apis[0], apis[1]
	if leader == b {
		oldAPI, newAPI = apis[1], apis[0]
	}
	t.Logf("operator %s leads the lease API at %s; %s stands by at %s", oldAPI.name, oldAPI.addr, newAPI.name, newAPI.addr)

	// Workers stop acquiring when stop closes; hard bounds everything they do.
	hard, cancelHard := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancelHard()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range failoverWorkers {
		wg.Go(func() { w.work(hard, stop, i) })
	}
	stopWorkers := sync.OnceFunc(func() {
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cancelHard()
			<-done
			t.Errorf("workers still running 30s after being stopped")
		}
	})
	defer stopWorkers()

	// Kill while some leases await their renewal, which then has to happen
	// on the new leader.
	eventually.Check(t, 30*time.Second, pollInterval, "grants before the kill", func(context.Context) error {
		if n := w.grantsBy(oldAPI.name); n < grantsBeforeKill {
			return fmt.Errorf("%d grants, want %d", n, grantsBeforeKill)
		}
		if n := w.unrenewedAt(time.Now()); n < 2 {
			return fmt.Errorf("%d live leases await their renewal, want 2", n)
		}
		return nil
	})
	fault := "kill"
	if partitioned {
		fault = "cut"
		partitions[leader].Cut()
	} else {
		kill(t, leader)
	}
	killed := time.Now()
	liveAtKill := w.liveAt(killed)
	horizon, err := persistedHorizon(t.Context(), t, ns)
	if err != nil {
		t.Fatalf("reading the lease horizon after the kill: %v", err)
	}
	t.Logf("%s operator %s with %d leases live; its persisted horizon is %v after the %s",
		fault, oldAPI.name, liveAtKill, horizon.Sub(killed).Round(time.Millisecond), fault)

	// Takeover within the lease duration (3s) plus two jittered retry
	// periods (1.2s) plus the horizon claim, with slack for a loaded
	// machine: 10s.
	eventually.Check(t, 10*time.Second, pollInterval, "operator "+newAPI.name+" leads the lease API", func(ctx context.Context) error {
		return newAPI.leading(ctx)
	})
	takeover := time.Since(killed)

	// Grants resume once the old leader's horizon (plus the clock-skew
	// allowance) has passed: after a crash, at most the TTL in use plus 17s
	// (docs/api.md, Leader changes).
	resumeBound := failoverLeaseTTL + 17*time.Second + 5*time.Second // + slack for a loaded machine
	eventually.Check(t, resumeBound+10*time.Second, pollInterval, "grants after the failover", func(context.Context) error {
		if n := w.grantsBy(newAPI.name); n < grantsAfterFailover {
			return fmt.Errorf("%d grants by %s, want %d", n, newAPI.name, grantsAfterFailover)
		}
		return nil
	})
	stopWorkers()

	grants, problems := w.results()
	for _, p := range problems {
		t.Error(p)
	}
	// (1) No proxy was ever held by two leases at once.
	for _, overlap := range doubleGrants(grants) {
		t.Errorf("double grant: %s", overlap)
	}

	// (2) Leases of the old leader were renewed on the new one.
	var lastOld, firstNew time.Time
	var beforeKill, afterKill, renewedAcross, releasedAcross, expiredAcross int
	for _, g := range grants {
		switch g.grantedBy {
		case oldAPI.name:
			beforeKill++
			lastOld = latest(lastOld, g.grantedAt)
			switch {
			case slices.Contains(g.renewedBy, newAPI.name):
				renewedAcross++
			case g.releasedBy == newAPI.name:
				releasedAcross++
			case g.expiredUnrenewed:
				expiredAcross++
			}
		case newAPI.name:
			afterKill++
			if firstNew.IsZero() || g.grantedAt.Before(firstNew) {
				firstNew = g.grantedAt
			}
		}
	}
	if renewedAcross == 0 {
		t.Errorf("no lease granted by %s was renewed on %s (%d live at the kill, %d expired unrenewed)",
			oldAPI.name, newAPI.name, liveAtKill, expiredAcross)
	}

	// (3) The new leader waited out the old leader's horizon, and no longer.
	recoverUntil := horizon.Add(server.DefaultMaxClockSkew) // the operator's skew allowance
	if firstNew.Before(recoverUntil) {
		t.Errorf("first grant by %s at %v, before the old leader's horizon + skew %v", newAPI.name, firstNew, recoverUntil)
	}
	if gap := firstNew.Sub(killed); gap > resumeBound {
		t.Errorf("first grant by %s %v after the kill, want within %v", newAPI.name, gap, resumeBound)
	}

	// (4) A leader cut off stops granting at its fence (its last renewal
	// of the leader Lease, timed from the send, plus the renew deadline:
	// 2s), which is before a standby can lead (the lease duration, 3s,
	// after that renewal), then exits once client-go's elector gives up.
	// The standby's takeover as seen here is an upper bound of when it
	// led, so the check is a weak form of the fence; the margin is logged.
	if partitioned {
		if code := leader.WaitExit(t, 30*time.Second); code != 1 {
			t.Errorf("the cut-off leader exited %d, want 1 (lost its Lease)", code)
		}
		if led := killed.Add(takeover); !lastOld.Before(led) {
			t.Errorf("the cut-off leader granted a lease %v after the cut, at or after %s led (%v after it): it did not fence itself",
				lastOld.Sub(killed).Round(10*time.Millisecond), newAPI.name, takeover.Round(10*time.Millisecond))
		}
		t.Logf("the cut-off leader granted its last lease %v after the cut; %s led %v after it",
			lastOld.Sub(killed).Round(10*time.Millisecond), newAPI.name, takeover.Round(10*time.Millisecond))
	}

	t.Logf("grants: %d by %s before the kill, %d by %s after it", beforeKill, oldAPI.name, afterKill, newAPI.name)
	t.Logf("takeover: %s led the lease API %v after the kill", newAPI.name, takeover.Round(10*time.Millisecond))
	t.Logf("grant gap: last grant by %s to first grant by %s: %v; kill to first grant: %v (horizon + skew was %v after the kill)",
		oldAPI.name, newAPI.name, firstNew.Sub(lastOld).Round(10*time.Millisecond),
		firstNew.Sub(killed).Round(10*time.Millisecond), recoverUntil.Sub(killed).Round(10*time.Millisecond))
	t.Logf("across the failover: of the %d leases live at the kill, %d renewed on %s, %d released there, %d expired before it led",
		liveAtKill, renewedAcross, newAPI.name, releasedAcross, expiredAcross)
}

// A checker that never fires proves nothing: doubleGrants on known histories.
func TestDoubleGrants(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1_000_000, 0).Add(time.Duration(s * float64(time.Second))) }
	tests := map[string]struct {
		grants []*grantRecord
		want   int
	}{
		"one after the other's release": {
			grants: []*grantRecord{
				grantOn("p", at(0), at(5), withEnd(at(1))),
				grantOn("p", at(1), at(6)),
			},
		},
		"one after the other's expiry": {
			grants: []*grantRecord{grantOn("p", at(0), at(5)), grantOn("p", at(5), at(10))},
		},
		"a renewal extends the first into the second": {
			grants: []*grantRecord{grantOn("p", at(0), at(7)), grantOn("p", at(6), at(11))},
			want:   1,
		},
		"released after the second grant": {
			grants: []*grantRecord{grantOn("p", at(0), at(5), withEnd(at(2))), grantOn("p", at(1.5), at(6.5))},
			want:   1,
		},
		"different proxies may overlap": {
			grants: []*grantRecord{grantOn("p", at(0), at(5)), grantOn("q", at(1), at(6))},
		},
		"a long lease overlaps two later ones": {
			grants: []*grantRecord{
				grantOn("p", at(0), at(10)),
				grantOn("p", at(1), at(2), withEnd(at(1.5))),
				grantOn("p", at(3), at(4)),
			},
			want: 2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := doubleGrants(tc.grants); len(got) != tc.want {
				t.Errorf("doubleGrants = %q, want %d overlaps", got, tc.want)
			}
		})
	}
}

func grantOn(proxy string, grantedAt, expiresAt time.Time, opts ...func(*grantRecord)) *grantRecord {
	g := &grantRecord{proxy: proxy, grantedAt: grantedAt, expiresAt: expiresAt, grantedBy: "a"}
	for _, o := range opts {
		o(g)
	}
	return g
}

func withEnd(t time.Time) func(*grantRecord) { return func(g *grantRecord) { g.ended = t } }

// grantRecord is one lease as its worker saw it.
type grantRecord struct {
	worker    int
	proxy     string // namespace/name
	id        string // the latest
	grantedAt time.Time
	// expiresAt is the last expiry the API told the worker.
	expiresAt  time.Time
	grantedBy  string   // operator name
	renewedBy  []string // operator names, one per successful renewal
	releasedBy string   // operator name
	// ended is when the worker sent the release (or learnt the lease was
	// lost); zero if it never did before expiresAt.
	ended time.Time
	// expiredUnrenewed: no leader answered the renewal before expiresAt.
	expiredUnrenewed bool
}

// end is when the lease stopped holding its proxy at the latest.
func (g *grantRecord) end() time.Time {
	if !g.ended.IsZero() && g.ended.Before(g.expiresAt) {
		return g.ended
	}
	return g.expiresAt
}

func (g *grantRecord) String() string {
	return fmt.Sprintf("%s by worker %d from %s [%s, %s]", g.proxy, g.worker, g.grantedBy,
		g.grantedAt.Format(time.StampMicro), g.end().Format(time.StampMicro))
}

// doubleGrants lists every pair of leases on one proxy (maxLeases 1) whose
// [grantedAt, end] intervals overlap. A release's end is when the worker
// sent it, which is no later than when the server ended the lease, so a
// reported overlap is a real one.
func doubleGrants(grants []*grantRecord) []string {
	byProxy := map[string][]*grantRecord{}
	for _, g := range grants {
		byProxy[g.proxy] = append(byProxy[g.proxy], g)
	}
	var out []string
	for _, gs := range byProxy {
		slices.SortFunc(gs, func(x, y *grantRecord) int { return x.grantedAt.Compare(y.grantedAt) })
		var holder *grantRecord // the lease reaching furthest so far
		for _, g := range gs {
			if holder != nil && g.grantedAt.Before(holder.end()) {
				out = append(out, fmt.Sprintf("%v granted while %v held it", g, holder))
			}
			if holder == nil || g.end().After(holder.end()) {
				holder = g
			}
		}
	}
	slices.Sort(out)
	return out
}

// leaseAPI is one replica's lease API.
type leaseAPI struct {
	name   string // the operator's
	addr   string
	client *client.Client
}

var leaseAddrLine = regexp.MustCompile(`"Serving the lease API" addr="([^"]+)"`)

// leaseAPIOf finds the address p serves the lease API on in its log (its
// --lease-addr is a free port picked by startOperator).
func leaseAPIOf(t *testing.T, p *operatortest.Process) *leaseAPI {
	t.Helper()
	var addr string
	eventually.Check(t, startTimeout, pollInterval, "operator "+p.Name+" serves the lease API", func(context.Context) error {
		m := leaseAddrLine.FindStringSubmatch(p.Logs())
		if m == nil {
			return errors.New("no \"Serving the lease API\" line in its log yet")
		}
		addr = m[1]
		return nil
	})
	c, err := client.New("http://"+addr, client.WithHTTPClient(&http.Client{Timeout: acquireWait + 10*time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return &leaseAPI{name: p.Name, addr: addr, client: c}
}

// leading is nil once the replica answers /readyz of the lease API: it leads.
func (api *leaseAPI) leading(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+api.addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("lease API /readyz: %d", resp.StatusCode)
	}
	return nil
}

// leaseWorkload runs workers against the replicas and records what they saw.
type leaseWorkload struct {
	apis []*leaseAPI
	ns   string

	mu     sync.Mutex
	grants []*grantRecord
	// problems are failures the API must never produce, such as a live
	// lease answered 404.
	problems []string
}

// work loops acquire → hold → renew → hold → release until stop closes.
func (w *leaseWorkload) work(ctx context.Context, stop <-chan struct{}, worker int) {
	prefer := worker % len(w.apis)
	for {
		select {
		case <-stop:
			return
		default:
		}
		g := w.acquire(ctx, stop, worker, &prefer)
		if g == nil {
			return
		}
		if !holdFor(ctx, randomHold()) {
			return
		}
		if !w.renew(ctx, g, &prefer) {
			continue // lost or expired: nothing to release
		}
		if !holdFor(ctx, randomHold()) {
			return
		}
		w.release(ctx, g, &prefer)
	}
}

// acquire returns a granted lease, or nil once stop closes or ctx ends.
func (w *leaseWorkload) acquire(ctx context.Context, stop <-chan struct{}, worker int, prefer *int) *grantRecord {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		var l *client.Lease
		by, err := w.onLeader(ctx, prefer, func(c *client.Client) error {
			var err error
			l, err = c.Acquire(ctx, client.AcquireRequest{
				Holder: "worker-" + itoa(worker), Namespace: w.ns, TTL: failoverLeaseTTL, Wait: acquireWait,
			})
			return err
		})
		switch {
		case err == nil:
			g := &grantRecord{worker: worker, proxy: l.Proxy.Namespace + "/" + l.Proxy.Name, id: l.ID,
				grantedAt: l.GrantedAt, expiresAt: l.ExpiresAt, grantedBy: by}
			w.mu.Lock()
			w.grants = append(w.grants, g)
			w.mu.Unlock()
			return g
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, client.ErrUnavailable):
			// NoneFree or Recovering after the long poll: ask again. Unavailable
			// (the horizon could not be persisted) gets a pause.
			var apiErr *client.Error
			if errors.As(err, &apiErr) && apiErr.Code == "Unavailable" && !holdFor(ctx, leaderlessPause) {
				return nil
			}
		default:
			w.problem("worker %d: acquire: %v", worker, err)
			return nil
		}
	}
}

// renew renews g once, on whichever replica leads, retrying until g
// expires. It reports whether g is still held.
func (w *leaseWorkload) renew(ctx context.Context, g *grantRecord, prefer *int) bool {
	w.mu.Lock()
	id, expiresAt := g.id, g.expiresAt
	w.mu.Unlock()
	until, cancel := context.WithDeadline(ctx, expiresAt)
	defer cancel()
	var sent time.Time
	var l *client.Lease
	by, err := w.onLeader(until, prefer, func(c *client.Client) error {
		sent = time.Now()
		var err error
		l, err = c.Renew(until, id, failoverLeaseTTL)
		return err
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		g.id, g.expiresAt = l.ID, l.ExpiresAt
		g.renewedBy = append(g.renewedBy, by)
		return true
	case errors.Is(err, client.ErrLeaseLost):
		g.ended = sent
		if sent.Add(validityMargin).Before(expiresAt) {
			w.problemLocked("renewing %v %v before its expiry on %s: %v", g, expiresAt.Sub(sent).Round(time.Millisecond), by, err)
		}
	case until.Err() != nil && ctx.Err() == nil:
		g.expiredUnrenewed = true
	default:
		w.problemLocked("renewing %v: %v", g, err)
	}
	return false
}

// release releases g on whichever replica leads, unless it expires first.
func (w *leaseWorkload) release(ctx context.Context, g *grantRecord, prefer *int) {
	w.mu.Lock()
	id, expiresAt := g.id, g.expiresAt
	w.mu.Unlock()
	until, cancel := context.WithDeadline(context.WithoutCancel(ctx), expiresAt)
	defer cancel()
	var sent time.Time
	by, err := w.onLeader(until, prefer, func(c *client.Client) error {
		sent = time.Now()
		return c.Release(until, id, client.OutcomeOK, "")
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		g.ended, g.releasedBy = sent, by
	case errors.Is(err, client.ErrLeaseLost):
		g.ended = sent
		if sent.Add(validityMargin).Before(expiresAt) {
			w.problemLocked("releasing %v %v before its expiry on %s: %v", g, expiresAt.Sub(sent).Round(time.Millisecond), by, err)
		}
	case until.Err() != nil:
		// Expired before any leader answered: it ended at expiresAt.
	default:
		w.problemLocked("releasing %v: %v", g, err)
	}
}

// onLeader runs call on the replica that leads and returns its name and
// call's error. It moves to the other replica on NotLeader or a
// connection error (the leader was killed), pauses when neither leads, and
// gives up when ctx ends.
func (w *leaseWorkload) onLeader(ctx context.Context, prefer *int, call func(*client.Client) error) (string, error) {
	for tries := 1; ; tries++ {
		api := w.apis[*prefer]
		err := call(api.client)
		if err == nil || !leaderless(err) || ctx.Err() != nil {
			return api.name, err
		}
		*prefer = (*prefer + 1) % len(w.apis)
		if tries%len(w.apis) == 0 && !holdFor(ctx, leaderlessPause) {
			return api.name, err
		}
	}
}

// leaderless: the replica does not lead (NotLeader), or did not answer at
// all (every error that is not the API's: refused, reset, EOF of a killed
// process).
func leaderless(err error) bool {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code == "NotLeader"
	}
	return true
}

func (w *leaseWorkload) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problemLocked(format, args...)
}

func (w *leaseWorkload) problemLocked(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// grantsBy counts the grants the replica named by made.
func (w *leaseWorkload) grantsBy(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, g := range w.grants {
		if g.grantedBy == name {
			n++
		}
	}
	return n
}

// liveAt counts the leases held at t (by what the workers know).
func (w *leaseWorkload) liveAt(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, g := range w.grants {
		if !g.grantedAt.After(t) && g.end().After(t) {
			n++
		}
	}
	return n
}

// unrenewedAt counts the leases live at t that still await their renewal.
func (w *leaseWorkload) unrenewedAt(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, g := range w.grants {
		if len(g.renewedBy) == 0 && g.ended.IsZero() && !g.expiredUnrenewed && g.expiresAt.After(t) {
			n++
		}
	}
	return n
}

// results returns copies of the grants and the problems, oldest grant first.
func (w *leaseWorkload) results() ([]*grantRecord, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	grants := make([]*grantRecord, 0, len(w.grants))
	for _, g := range w.grants {
		c := *g
		c.renewedBy = slices.Clone(g.renewedBy)
		grants = append(grants, &c)
	}
	slices.SortFunc(grants, func(x, y *grantRecord) int { return x.grantedAt.Compare(y.grantedAt) })
	return grants, slices.Clone(w.problems)
}

// randomHold is how long a worker uses a proxy between calls.
func randomHold() time.Duration {
	return 100*time.Millisecond + rand.N(400*time.Millisecond)
}

// holdFor waits d, or until ctx ends (false).
func holdFor(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// persistedHorizon reads the horizon the leader persisted in the lease
// horizon ConfigMap: no lease it granted expires after it.
func persistedHorizon(ctx context.Context, t *testing.T, ns string) (time.Time, error) {
	kube, _ := clients(t)
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, operator.LeaseHorizonConfigMap, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, cm.Data["horizon"])
}

// failoverProxy is an External Proxy at addr, leased one holder at a time,
// probed every second through itself at healthURL.
func failoverProxy(ns, name, addr, healthURL string) *crawlv1alpha1.Proxy {
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:      crawlv1alpha1.ModeExternal,
			Endpoint:  &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: int32(port)},
			MaxLeases: 1,
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:            healthURL,
				ExpectedStatus: http.StatusNoContent,
				Interval:       &metav1.Duration{Duration: time.Second},
				Timeout:        &metav1.Duration{Duration: 500 * time.Millisecond},
			},
		},
	}
}

func createLeasedProxy(t *testing.T, p *crawlv1alpha1.Proxy) {
	t.Helper()
	_, crawl := clients(t)
	if _, err := crawl.CrawlV1alpha1().Proxies(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Proxy %s/%s: %v", p.Namespace, p.Name, err)
	}
}
