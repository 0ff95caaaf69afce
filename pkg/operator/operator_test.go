package operator_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// Generous bounds for a 2-core machine running race-enabled operators next
// to etcd and kube-apiserver; failover itself is bounded tighter below.
const (
	startTimeout    = time.Minute
	convergeTimeout = 30 * time.Second
)

// Two replicas: only the leader reconciles; after the leader is killed
// (no drain, no release) the standby takes over once the lease expires and
// keeps the fleet converged.
func TestLeaderFailover(t *testing.T) {
	ns := newNamespace(t)
	a := startOperator(t, "a", ns, leaseTimings...)
	b := startOperator(t, "b", ns, leaseTimings...)

	leader, standbys := waitForLeader(t, startTimeout, a, b)
	standby := standbys[0]
	t.Logf("operator %s leads, %s stands by", leader.Name, standby.Name)
	// Every replica serves health; a standby's caches are warm, so it is ready too.
	for _, p := range []*operatortest.Process{a, b} {
		waitReady(t, p, startTimeout)
		code, body, err := p.Get(t.Context(), "/healthz")
		if err != nil || code != http.StatusOK {
			t.Fatalf("operator %s /healthz: %d %s %v", p.Name, code, body, err)
		}
	}

	const fleet = 5
	for i := range fleet {
		createExternalProxy(t, ns, "px-"+itoa(i), int32(31280+i))
	}
	waitConverged(t, ns, fleet, convergeTimeout)

	leaderMetrics, err := leader.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := leaderMetrics.Value("proxy_operator_reconcile_total", nil); got < fleet {
		t.Errorf("leader %s: proxy_operator_reconcile_total = %v, want at least %d", leader.Name, got, fleet)
	}
	if got, _ := leaderMetrics.Value("proxy_operator_proxies", nil); got != fleet {
		t.Errorf("leader %s: proxy_operator_proxies = %v, want %d", leader.Name, got, fleet)
	}
	standbyMetrics, err := standby.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := standbyMetrics["proxy_operator_reconcile_total"]; !ok {
		t.Errorf("standby %s exports no proxy_operator_reconcile_total; want it at 0", standby.Name)
	}
	for name, want := range map[string]float64{
		"proxy_operator_reconcile_total": 0,
		"proxy_operator_leader":          0,
		"proxy_operator_proxies":         fleet, // warm cache
	} {
		if got, _ := standbyMetrics.Value(name, nil); got != want {
			t.Errorf("standby %s: %s = %v, want %v", standby.Name, name, got, want)
		}
	}

	oldHolder, err := leaseHolder(t.Context(), t, ns)
	if err != nil {
		t.Fatal(err)
	}
	kill(t, leader)
	killed := time.Now()

	// The Lease lasts 3s after the last renewal; the standby retries every
	// 500ms (with jitter). 3s + a few seconds of slack.
	eventually.Check(t, 8*time.Second, pollInterval, "standby "+standby.Name+" takes over", func(ctx context.Context) error {
		v, err := leaderGauge(ctx, standby)
		if err != nil {
			return err
		}
		if v != 1 {
			return errors.New("proxy_operator_leader is 0")
		}
		return nil
	})
	t.Logf("operator %s took over %v after the leader was killed", standby.Name, time.Since(killed).Round(100*time.Millisecond))
	if holder, err := leaseHolder(t.Context(), t, ns); err != nil || holder == oldHolder || holder == "" {
		t.Errorf("Lease holder after failover = %q (err %v); want a new holder, not %q", holder, err, oldHolder)
	}

	// The new leader keeps the fleet converged: a new Proxy, and a spec change.
	createExternalProxy(t, ns, "px-after-failover", 31290)
	_, crawl := clients(t)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(t.Context(), "px-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Endpoint.Port = 31299
		_, err = crawl.CrawlV1alpha1().Proxies(ns).Update(t.Context(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitConverged(t, ns, fleet+1, convergeTimeout)
	after, err := standby.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := after.Value("proxy_operator_reconcile_total", nil); got < 2 {
		t.Errorf("new leader %s: proxy_operator_reconcile_total = %v, want at least 2", standby.Name, got)
	}
}

// SIGTERM drains and exits 0 within seconds, and releases the Lease so the
// standby takes over at once rather than after the lease duration.
func TestSIGTERMReleasesLease(t *testing.T) {
	ns := newNamespace(t)
	// A long lease: a takeover within a few seconds can only come from a release.
	longLease := []string{
		"--leader-elect-lease-duration=30s",
		"--leader-elect-renew-deadline=20s",
		"--leader-elect-retry-period=500ms",
	}
	a := startOperator(t, "a", ns, longLease...)
	waitForLeader(t, startTimeout, a)
	b := startOperator(t, "b", ns, longLease...)
	waitReady(t, b, startTimeout)
	if v, err := leaderGauge(t.Context(), b); err != nil || v != 0 {
		t.Fatalf("standby b: proxy_operator_leader = %v (err %v), want 0", v, err)
	}
	createExternalProxy(t, ns, "px", 31280)
	waitConverged(t, ns, 1, convergeTimeout)
	holder, err := leaseHolder(t.Context(), t, ns)
	if err != nil || holder == "" {
		t.Fatalf("Lease holder = %q (err %v), want a's identity", holder, err)
	}

	a.Signal(t, syscall.SIGTERM)
	stopped := time.Now()
	if code := a.WaitExit(t, 5*time.Second); code != 0 {
		t.Errorf("operator a exit code after SIGTERM = %d, want 0", code)
	}
	t.Logf("operator a exited %v after SIGTERM", time.Since(stopped).Round(10*time.Millisecond))
	got, err := leaseHolder(t.Context(), t, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got == holder {
		t.Errorf("Lease still held by %q after a exited; want it released", holder)
	}
	eventually.Check(t, 5*time.Second, pollInterval, "standby b takes over the released lease", func(ctx context.Context) error {
		v, err := leaderGauge(ctx, b)
		if err != nil {
			return err
		}
		if v != 1 {
			return errors.New("proxy_operator_leader is 0")
		}
		return nil
	})
	logs := a.Logs()
	for _, step := range []string{
		"Controller stopped: workers finished their items",
		"Leader election stopped; lease released if held",
		"Informers stopped",
		"Metrics server stopped",
		"Stopped",
	} {
		if !strings.Contains(logs, step) {
			t.Errorf("log of a lacks the shutdown step %q", step)
		}
	}
}

// A leader whose Lease is taken from it exits non-zero, so its Pod restarts
// clean instead of leading again with state from its first term.
func TestLostLeaseExits(t *testing.T) {
	ns := newNamespace(t)
	a := startOperator(t, "a", ns, leaseTimings...)
	waitForLeader(t, startTimeout, a)

	kube, _ := clients(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := kube.CoordinationV1().Leases(ns).Get(t.Context(), "proxy-operator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		thief, hour := "thief", int32(3600)
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &thief, &hour
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		_, err = kube.CoordinationV1().Leases(ns).Update(t.Context(), lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Renew deadline 2s, retry 500ms, then the drain.
	if code := a.WaitExit(t, 10*time.Second); code != 1 {
		t.Errorf("exit code after losing the lease = %d, want 1", code)
	}
	if logs := a.Logs(); !strings.Contains(logs, "lost the leader lease") {
		t.Errorf("log of a does not say it lost the lease")
	}
	if holder, err := leaseHolder(t.Context(), t, ns); err != nil || holder != "thief" {
		t.Errorf("Lease holder = %q (err %v), want the thief's, untouched", holder, err)
	}
}

// Without leader election the process leads at once, and still drains on SIGTERM.
func TestNoLeaderElection(t *testing.T) {
	ns := newNamespace(t)
	a := startOperator(t, "a", ns, "--leader-elect=false")
	waitForLeader(t, startTimeout, a)
	createExternalProxy(t, ns, "px", 31280)
	waitConverged(t, ns, 1, convergeTimeout)
	kube, _ := clients(t)
	if _, err := kube.CoordinationV1().Leases(ns).Get(t.Context(), "proxy-operator", metav1.GetOptions{}); err == nil {
		t.Errorf("a Lease exists although --leader-elect=false")
	}
	a.Signal(t, syscall.SIGTERM)
	if code := a.WaitExit(t, 5*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// Start-up errors are reported with the flag they concern and exit non-zero.
func TestStartupErrors(t *testing.T) {
	ns := newNamespace(t)
	tests := map[string]struct {
		args     []string
		wantCode int
		wantLog  string
	}{
		"gce credentials Secret missing": {
			args:     []string{"--providers=gce", "--gce-project=p", "--gce-zone=z", "--gce-credentials-secret=default/no-such-secret"},
			wantCode: 1,
			wantLog:  `--gce-credentials-secret default/no-such-secret`,
		},
		"version": {
			args:     []string{"--version"},
			wantCode: 0,
			wantLog:  "proxy-operator ",
		},
		"verbosity that would log request bodies": {
			args:     []string{"--v=9"},
			wantCode: 2,
			wantLog:  "-v=9: the highest level is 7",
		},
		"vmodule that would log request bodies": {
			args:     []string{"--vmodule=round_trippers=8"},
			wantCode: 2,
			wantLog:  "-vmodule=round_trippers=8: the highest level is 7",
		},
		"invalid flag": {
			args:     []string{"--workers=0"},
			wantCode: 2,
			wantLog:  "--workers: must be at least 1, got 0",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := startOperator(t, operatortest.DNSName(name), ns, tc.args...)
			if code := p.WaitExit(t, 30*time.Second); code != tc.wantCode {
				t.Errorf("exit code = %d, want %d", code, tc.wantCode)
			}
			if logs := p.Logs(); !strings.Contains(logs, tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, logs)
			}
		})
	}
}
