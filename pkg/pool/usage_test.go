package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func TestUsage(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	usd := &crawlv1alpha1.PoolCost{Currency: "USD", PerInstanceHour: "0.50", PerGiB: "4"}
	counts := func(ok, banned, errs int64) crawlv1alpha1.OutcomeCounts {
		return crawlv1alpha1.OutcomeCounts{OK: ok, Banned: banned, Error: errs}
	}
	for _, tc := range []struct {
		name     string
		prev     *crawlv1alpha1.PoolUsage
		outcomes crawlv1alpha1.OutcomeCounts
		gib      float64
		members  int
		cost     *crawlv1alpha1.PoolCost
		now      time.Duration
		want     *crawlv1alpha1.PoolUsage
	}{{
		name:    "first count: no hours yet, no rate before an outcome",
		members: 3, cost: usd,
		want: &crawlv1alpha1.PoolUsage{InstanceHours: "0.0000", CountedAt: at(0), Cost: "0.00 USD"},
	}, {
		name:     "an hour of four members, 950 ok of 1000",
		prev:     &crawlv1alpha1.PoolUsage{InstanceHours: "1.0000", CountedAt: at(0)},
		outcomes: counts(950, 40, 10), members: 4, cost: usd, now: time.Hour,
		want: &crawlv1alpha1.PoolUsage{
			Outcomes:      crawlv1alpha1.OutcomeCounts{OK: 950, Banned: 40, Error: 10, SuccessRate: "95.0%"},
			InstanceHours: "5.0000", CountedAt: at(time.Hour), Cost: "2.50 USD", CostPer1000OK: "2.6316 USD",
		},
	}, {
		name:     "transferred GiB at the GiB price",
		prev:     &crawlv1alpha1.PoolUsage{InstanceHours: "0.0000", TransferredGiB: "2.000000", CountedAt: at(0)},
		outcomes: counts(10, 0, 0), gib: 2.5, members: 0, cost: usd, now: time.Hour,
		want: &crawlv1alpha1.PoolUsage{
			Outcomes:      crawlv1alpha1.OutcomeCounts{OK: 10, SuccessRate: "100.0%"},
			InstanceHours: "0.0000", TransferredGiB: "2.500000", CountedAt: at(time.Hour), Cost: "10.00 USD", CostPer1000OK: "1000.0000 USD",
		},
	}, {
		name:     "within the poll and no new outcome: unchanged, so no write",
		prev:     &crawlv1alpha1.PoolUsage{Outcomes: counts(5, 0, 0), InstanceHours: "2.0000", CountedAt: at(0)},
		outcomes: counts(5, 0, 0), members: 10, now: 10 * time.Second,
		want: &crawlv1alpha1.PoolUsage{Outcomes: crawlv1alpha1.OutcomeCounts{OK: 5, SuccessRate: "100.0%"}, InstanceHours: "2.0000", CountedAt: at(0)},
	}, {
		name:     "within the poll with a new outcome: counted to now",
		prev:     &crawlv1alpha1.PoolUsage{Outcomes: counts(5, 0, 0), InstanceHours: "2.0000", CountedAt: at(0)},
		outcomes: counts(5, 1, 0), members: 36, now: 10 * time.Second,
		want: &crawlv1alpha1.PoolUsage{Outcomes: crawlv1alpha1.OutcomeCounts{OK: 5, Banned: 1, SuccessRate: "83.3%"}, InstanceHours: "2.1000", CountedAt: at(10 * time.Second)},
	}, {
		name:    "a clock behind countedAt adds nothing",
		prev:    &crawlv1alpha1.PoolUsage{InstanceHours: "2.0000", CountedAt: at(time.Hour)},
		members: 5, now: 0,
		want: &crawlv1alpha1.PoolUsage{InstanceHours: "2.0000", CountedAt: at(time.Hour)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Usage(tc.prev, tc.outcomes, tc.gib, tc.members, tc.cost, t0.Add(tc.now), UsagePoll)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Usage (-want +got):\n%s", diff)
			}
		})
	}
}
