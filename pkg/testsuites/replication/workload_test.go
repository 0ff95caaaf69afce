package replication_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/leasemodel"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// The workload of the history tests: workers calling every replica at
// random, as two identities, exercising what must survive a change of
// leader (leases, bans, a CrawlPolicy budget, session state, sticky
// sessions), each call recorded with its call and return times on this
// process's monotonic clock and what came of it.

const (
	// politeDomain is bound by the fleet's CrawlPolicy rule.
	politeDomain = "polite.example"
	// stickyDomain is the sticky sessions' domain: never banned, so that
	// a session's acquire may always join its lease.
	stickyDomain = "sticky.example"
	leaseTTL     = 2 * time.Second
	acquireWait  = time.Second
	// callTimeout bounds each call past its wait: a replica stopped or cut
	// off leaves the call unanswered, and the worker goes on.
	callTimeout = 3 * time.Second
)

// politeBudget is the CrawlPolicy rule on politeDomain.
var politeBudget = leasemodel.Budget{MaxConcurrent: 2, MinInterval: 200 * time.Millisecond}

// call is one recorded call: the model's operation, the replica asked and
// the API's error code ("" for none, or for no answer).
type call struct {
	op      leasemodel.Op
	replica int
	code    string
}

// recorder keeps the history.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	calls []call
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// now is the time since the history's start, on the monotonic clock.
func (rec *recorder) now() time.Duration { return time.Since(rec.start) }

func (rec *recorder) add(c call) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.calls = append(rec.calls, c)
}

func (rec *recorder) snapshot() []call {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]call(nil), rec.calls...)
}

func (rec *recorder) len() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.calls)
}

// history is the recorded operations.
func history(calls []call) []leasemodel.Op {
	out := make([]leasemodel.Op, len(calls))
	for i, c := range calls {
		out[i] = c.op
	}
	return out
}

// modelConfig is what the model knows of the fleet steadyFleet makes.
func modelConfig(maxLeases []int32) leasemodel.Config {
	cfg := leasemodel.Config{MaxLeases: map[string]int{}, Budgets: map[string]leasemodel.Budget{politeDomain: politeBudget}, Timeout: 5 * time.Minute}
	for i, m := range maxLeases {
		cfg.MaxLeases[proxyName(i)] = int(m)
	}
	return cfg
}

func proxyName(i int) string { return "px-" + strconv.Itoa(i) }

// steadyFleet makes one External Proxy per entry of maxLeases, on forward
// proxies of this process, with health checks that tolerate a loaded
// machine (a proxy that left Ready would revoke leases behind the model's
// back), and the CrawlPolicy of politeDomain; it waits until the leader
// offers them all.
func (g *group) steadyFleet(maxLeases []int32) {
	g.t.Helper()
	target := proxytest.StartHTTPTarget(g.t)
	for i, m := range maxLeases {
		px := proxytest.StartInProcess(g.t, proxytest.Options{Verbosity: 1})
		_, port, _ := net.SplitHostPort(px.Addr)
		p, _ := strconv.Atoi(port)
		_, err := g.crawl.CrawlV1alpha1().Proxies(g.ns).Create(g.t.Context(), &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: proxyName(i)},
			Spec: crawlv1alpha1.ProxySpec{
				Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: int32(p)}, MaxLeases: m,
				HealthCheck: crawlv1alpha1.HealthCheck{URL: target.URL + "/generate_204", ExpectedStatus: http.StatusNoContent,
					Interval: &metav1.Duration{Duration: 2 * time.Second}, Timeout: &metav1.Duration{Duration: time.Second}, FailureThreshold: 100},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			g.t.Fatal(err)
		}
	}
	maxConcurrent := int32(politeBudget.MaxConcurrent)
	_, err := g.crawl.CrawlV1alpha1().CrawlPolicies(g.ns).Create(g.t.Context(), &crawlv1alpha1.CrawlPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "polite"},
		Spec: crawlv1alpha1.CrawlPolicySpec{Rules: []crawlv1alpha1.DomainRule{{Host: politeDomain,
			DomainLimits: crawlv1alpha1.DomainLimits{MaxConcurrent: &maxConcurrent, MinInterval: &metav1.Duration{Duration: politeBudget.MinInterval}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	eventually.Check(g.t, startTimeout, pollInterval, "every proxy offered", func(ctx context.Context) error {
		proxies, err := g.leader(startTimeout).api.Proxies(ctx, g.ns, "")
		if err != nil {
			return err
		}
		if len(proxies) != len(maxLeases) {
			return fmt.Errorf("%d Ready proxies offered, want %d", len(proxies), len(maxLeases))
		}
		return nil
	})
}

// worker is one crawler of the workload.
type worker struct {
	g        *group
	rec      *recorder
	id       int
	identity string
	rng      *rand.Rand
}

// historyWorkers runs n workers until ctx ends. Even workers are alice,
// odd ones bob; sessions are shared by two workers of one identity.
func (g *group) historyWorkers(ctx context.Context, n int, rec *recorder) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		w := &worker{g: g, rec: rec, id: i, identity: []string{"alice", "bob"}[i%2], rng: rand.New(rand.NewPCG(uint64(i), 62))}
		wg.Go(func() {
			for ctx.Err() == nil {
				w.round(ctx)
			}
		})
	}
	return &wg
}

// round is one use of a lease: what kind is drawn at random.
func (w *worker) round(ctx context.Context) {
	switch n := w.rng.IntN(100); {
	case n < 25: // a plain lease, renewed once in a while
		if l := w.acquire(ctx, client.AcquireRequest{}); l != nil {
			if w.rng.IntN(2) == 0 {
				w.renew(ctx, l)
			}
			w.release(ctx, l, client.OutcomeOK, "")
		}
	case n < 45: // a site that bans now and then: cool-downs
		d := fmt.Sprintf("ban-%d.example", w.rng.IntN(4))
		if l := w.acquire(ctx, client.AcquireRequest{Domain: d}); l != nil {
			if w.rng.IntN(3) == 0 {
				w.release(ctx, l, client.OutcomeBanned, d)
			} else {
				w.release(ctx, l, client.OutcomeOK, "")
			}
		}
	case n < 60: // the CrawlPolicy's budget
		if l := w.acquire(ctx, client.AcquireRequest{Domain: politeDomain}); l != nil {
			w.release(ctx, l, client.OutcomeOK, "")
		}
	case n < 80: // session state kept for a proxy and domain
		d := fmt.Sprintf("state-%d.example", w.rng.IntN(3))
		if l := w.acquire(ctx, client.AcquireRequest{Domain: d}); l != nil {
			w.put(ctx, l, fmt.Sprintf("jar of w%d at %v", w.id, w.rec.now()))
			w.release(ctx, l, client.OutcomeOK, "")
		}
	default: // a sticky session, which its partner worker may join
		s := fmt.Sprintf("session-%d", w.id/2%2)
		if l := w.acquire(ctx, client.AcquireRequest{Domain: stickyDomain, Session: s}); l != nil {
			w.renew(ctx, l)
			if w.rng.IntN(2) == 0 {
				w.release(ctx, l, client.OutcomeOK, "")
			}
		}
	}
}

// held is a lease a worker holds: its latest ID and what the model names
// it by.
type held struct {
	id  string
	ref leasemodel.LeaseRef
	op  leasemodel.Op // the acquire's, for the lease's domain and session
}

// replica picks the replica of the next call, and its client as the
// worker's identity.
func (w *worker) replica() (int, *client.Client) {
	i := w.rng.IntN(len(w.g.replicas))
	return i, w.g.replicas[i].api.ActingFor(w.identity, "uid-"+w.identity, nil)
}

func (w *worker) record(op leasemodel.Op, replica int, err error) {
	op.Client, op.Identity = w.id, w.identity
	var apiErr *client.Error
	code := ""
	if errors.As(err, &apiErr) {
		code = apiErr.Code
	}
	op.Result = resultOf(op.Kind, err)
	w.rec.add(call{op: op, replica: replica, code: code})
}

// resultOf is what an answer tells the model. An acquire refused in any
// way granted nothing the model need know of (a grant whose answer was
// lost inside the replicas is a lease nobody holds, which only leaves the
// model fewer leases to check against); a renewal, a release or a put
// answered 5xx may still have been applied.
func resultOf(kind leasemodel.Kind, err error) leasemodel.Result {
	var apiErr *client.Error
	switch {
	case err == nil:
		return leasemodel.Ack
	case !errors.As(err, &apiErr):
		return leasemodel.Unknown
	case apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusConflict || apiErr.StatusCode == http.StatusGone:
		return leasemodel.Gone
	case apiErr.StatusCode < 500 && apiErr.StatusCode != http.StatusTooManyRequests:
		return leasemodel.Refused
	case kind == leasemodel.Acquire:
		return leasemodel.Refused
	}
	return leasemodel.Unknown
}

func (w *worker) acquire(ctx context.Context, req client.AcquireRequest) *held {
	req.Holder, req.Namespace, req.TTL, req.Wait = fmt.Sprintf("w%d", w.id), w.g.ns, leaseTTL, acquireWait
	ctx, cancel := context.WithTimeout(ctx, acquireWait+callTimeout)
	defer cancel()
	i, api := w.replica()
	op := leasemodel.Op{Kind: leasemodel.Acquire, Domain: req.Domain, Session: req.Session, TTL: req.TTL, Call: w.rec.now()}
	l, err := api.Acquire(ctx, req)
	op.Return = w.rec.now()
	if err == nil {
		op.Lease, op.TTL, op.State = leasemodel.LeaseRef{Proxy: l.Proxy.Name, GrantedAt: l.GrantedAt}, l.TTL, string(l.State)
	}
	w.record(op, i, err)
	if err != nil {
		return nil
	}
	op.Client, op.Identity = w.id, w.identity
	return &held{id: l.ID, ref: op.Lease, op: op}
}

// on is an operation on h's lease.
func (w *worker) on(h *held, kind leasemodel.Kind) leasemodel.Op {
	return leasemodel.Op{Kind: kind, Lease: h.ref, Domain: h.op.Domain, Session: h.op.Session, TTL: leaseTTL, Call: w.rec.now()}
}

func (w *worker) renew(ctx context.Context, h *held) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	i, api := w.replica()
	op := w.on(h, leasemodel.Renew)
	l, err := api.Renew(ctx, h.id, leaseTTL)
	op.Return = w.rec.now()
	if err == nil {
		h.id, op.TTL = l.ID, l.TTL
	}
	w.record(op, i, err)
}

func (w *worker) release(ctx context.Context, h *held, outcome client.Outcome, domain string) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	i, api := w.replica()
	op := w.on(h, leasemodel.Release)
	op.Outcome = string(outcome)
	if outcome == client.OutcomeBanned {
		op.BanDomain = domain
	}
	err := api.Release(ctx, h.id, outcome, domain)
	op.Return = w.rec.now()
	w.record(op, i, err)
}

func (w *worker) put(ctx context.Context, h *held, state string) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	i, api := w.replica()
	op := w.on(h, leasemodel.PutState)
	op.State = state
	err := api.PutState(ctx, h.id, []byte(state))
	op.Return = w.rec.now()
	w.record(op, i, err)
}

// checkHistory checks the recorded history against the model, logs how
// it was partitioned and how long each model took, and fails t on any
// violation or unknown verdict, or on a revoked lease (which the model
// cannot see coming).
func checkHistory(t *testing.T, calls []call, cfg leasemodel.Config) leasemodel.Report {
	t.Helper()
	codes := map[string]int{}
	for _, c := range calls {
		if c.code != "" {
			codes[c.code]++
		}
	}
	t.Logf("answers with an error code: %v", codes)
	if codes["Revoked"] > 0 {
		t.Errorf("%d calls answered Revoked: a proxy left Ready, which the model does not follow", codes["Revoked"])
	}
	start := time.Now()
	r := leasemodel.Check(cfg, history(calls))
	t.Logf("history checked in %v: %v", time.Since(start).Round(time.Millisecond), r)
	return r
}

// saveHistory writes the calls, each with the replica it went to and its
// error code, and the faults, in the order they began, to the test's
// artifact directory (kept with go test -artifacts), and returns the
// file's path: a violation is read against the calls around it.
func saveHistory(t *testing.T, calls []call, faults []fault) string {
	t.Helper()
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for _, c := range calls {
		lines = append(lines, line{c.op.Call, fmt.Sprintf("%v replica-%d %s", c.op, c.replica, c.code)})
	}
	for _, f := range faults {
		lines = append(lines, line{f.at, fmt.Sprintf("FAULT %v, healed at %v", f, f.healed.Round(time.Millisecond))})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.ArtifactDir(), "history.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Sprintf("not saved: %v", err)
	}
	return path
}
