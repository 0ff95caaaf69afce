package poolintegration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestReportsOnEndedLeasesCountNothing (issue 64, "reports on ended
// leases count forever"): on the operator binary, a holder's reports count
// towards its pool's status.usage only with a renewal or release that
// succeeds. Five renewals of a released lease, each carrying a report of a
// GiB and a million requests, are answered 404 and leave status.usage as
// the live lease's reports and its release made it.
func TestReportsOnEndedLeasesCountNothing(t *testing.T) {
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("reports", 1, target.URL, func(p *v1alpha1.ProxyPool) {
		p.Spec.Cost = &v1alpha1.PoolCost{Currency: "USD", PerGiB: "8.00"}
	}))
	eventually.Check(t, time.Minute, interval, "the pool settled", func(ctx context.Context) error { return pt.settled(ctx, "reports", 1) })
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "crawler", Namespace: pt.ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.RenewReporting(t.Context(), l.ID, 0, client.Report{OKRequests: 3, TransferredBytes: 1 << 20}); err != nil {
		t.Fatalf("a report on the live lease: %v", err)
	}
	if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, err := lc.RenewReporting(t.Context(), l.ID, 0, client.Report{OKRequests: 1 << 20, TransferredBytes: 1 << 30})
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Fatalf("renewal %d of the released lease: %v, want 404", i+1, err)
		}
	}
	// The controller writes status.usage from the store's counts: wait for
	// the live lease's report and the release, then hold that nothing more
	// comes for a few status writes.
	want := v1alpha1.OutcomeCounts{OK: 4}
	eventually.Check(t, time.Minute, interval, "status.usage counts the live lease's report and its release", func(ctx context.Context) error {
		return usageIs(ctx, pt, want, "0.000977")
	})
	hold, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = eventually.Poll(hold, interval, func(ctx context.Context) error {
		if err := usageIs(ctx, pt, want, "0.000977"); err != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
		}
		return errStillHolds
	})
	if errors.Is(err, eventually.ErrHopeless) {
		t.Fatalf("status.usage moved after the renewals of the released lease: %v", err)
	}
}

// errStillHolds keeps a Poll going for as long as its context lasts.
var errStillHolds = errors.New("still holds")

func usageIs(ctx context.Context, pt *poolTest, outcomes v1alpha1.OutcomeCounts, gib string) error {
	p, err := pt.pool(ctx, "reports")
	if err != nil {
		return err
	}
	u := p.Status.Usage
	if u == nil || u.Outcomes.OK != outcomes.OK || u.Outcomes.Banned != outcomes.Banned || u.TransferredGiB != gib {
		return fmt.Errorf("status.usage %+v, want %d ok, %d banned and %s GiB", u, outcomes.OK, outcomes.Banned, gib)
	}
	return nil
}
