package pool

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// OutcomeCounter tells the outcomes the lease store counted for a pool's
// members since it was made (pkg/lease/store.Store implements it).
type OutcomeCounter interface {
	PoolOutcomes(pool store.ObjectName) store.Outcomes
}

// UsagePoll is how often a pool's status.usage is brought up to date when
// nothing else changed: instance-hours grow every second, and a status
// write per second per pool would be load, not news.
const UsagePoll = 30 * time.Second

// usageState carries status.usage across a leader change: the store counts
// from zero in each operator process, so the pool's outcomes in its status
// when this process first saw it are the base the store's counts add to.
type usageState struct {
	outcomes OutcomeCounter
	poll     time.Duration

	mu   sync.Mutex
	base map[cache.ObjectName]usageBase
}

type usageBase struct {
	uid            types.UID
	outcomes       crawlv1alpha1.OutcomeCounts
	transferredGiB float64
}

func newUsageState(outcomes OutcomeCounter, poll time.Duration) usageState {
	if poll <= 0 {
		poll = UsagePoll
	}
	return usageState{outcomes: outcomes, poll: poll, base: map[cache.ObjectName]usageBase{}}
}

// baseOf is the pool's outcomes as its status had them when this process
// first saw it (this incarnation of it: a pool deleted and made again
// starts afresh).
func (u *usageState) baseOf(cached *crawlv1alpha1.ProxyPool) usageBase {
	u.mu.Lock()
	defer u.mu.Unlock()
	key := cache.MetaObjectToName(cached)
	b, ok := u.base[key]
	if !ok || b.uid != cached.UID {
		b = usageBase{uid: cached.UID}
		if cached.Status.Usage != nil {
			b.outcomes = cached.Status.Usage.Outcomes
			b.transferredGiB = parseDecimal(cached.Status.Usage.TransferredGiB)
		}
		u.base[key] = b
	}
	return b
}

func (u *usageState) forget(key cache.ObjectName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.base, key)
}

// stageUsage sets status.usage; without a store (nil) it is left alone.
func (u *usageState) stageUsage(pool, cached *crawlv1alpha1.ProxyPool, members int, now time.Time) {
	if u.outcomes == nil {
		return
	}
	base := u.baseOf(cached)
	counted := u.outcomes.PoolOutcomes(store.ObjectName{Namespace: pool.Namespace, Name: pool.Name})
	o := base.outcomes
	outcomes := crawlv1alpha1.OutcomeCounts{OK: o.OK + counted.OK, Banned: o.Banned + counted.Banned, Error: o.Error + counted.Error}
	gib := base.transferredGiB + float64(counted.TransferredBytes)/(1<<30)
	pool.Status.Usage = Usage(cached.Status.Usage, outcomes, gib, members, pool.Spec.Cost, now, u.poll)
}

// Usage is a pool's usage now: outcomes and transferred GiB as counted,
// the instance-hours of prev plus members' time since prev.CountedAt, and
// their cost at spec.cost's prices. The hours move only when the outcomes
// did or every poll, so that most syncs write no status.
func Usage(prev *crawlv1alpha1.PoolUsage, outcomes crawlv1alpha1.OutcomeCounts, transferredGiB float64, members int, cost *crawlv1alpha1.PoolCost, now time.Time, poll time.Duration) *crawlv1alpha1.PoolUsage {
	now = now.Truncate(time.Second)
	u := &crawlv1alpha1.PoolUsage{Outcomes: withRate(outcomes), CountedAt: &metav1.Time{Time: now}}
	hours := 0.0
	if prev != nil {
		hours = parseDecimal(prev.InstanceHours)
		if prev.CountedAt != nil {
			since := now.Sub(prev.CountedAt.Time)
			if since < 0 || (since < poll && withRate(prev.Outcomes) == u.Outcomes) {
				since, u.CountedAt = 0, prev.CountedAt.DeepCopy()
			}
			hours += float64(members) * since.Hours()
		}
	}
	u.InstanceHours = strconv.FormatFloat(hours, 'f', 4, 64)
	if transferredGiB > 0 {
		u.TransferredGiB = strconv.FormatFloat(transferredGiB, 'f', 6, 64)
	}
	if cost != nil {
		total := costOf(u, cost)
		u.Cost = fmt.Sprintf("%.2f %s", total, cost.Currency)
		if u.Outcomes.OK > 0 {
			u.CostPer1000OK = fmt.Sprintf("%.4f %s", total*1000/float64(u.Outcomes.OK), cost.Currency)
		}
	}
	return u
}

// withRate fills in the success rate; empty before the first outcome.
func withRate(o crawlv1alpha1.OutcomeCounts) crawlv1alpha1.OutcomeCounts {
	o.SuccessRate = ""
	if total := o.OK + o.Banned + o.Error; total > 0 {
		o.SuccessRate = strconv.FormatFloat(100*float64(o.OK)/float64(total), 'f', 1, 64) + "%"
	}
	return o
}

// parseDecimal reads a decimal the API validated (spec.cost's pattern) or
// this package wrote; anything else counts as zero.
func parseDecimal(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0
	}
	return f
}

// reportCost puts status.usage's cost in the metrics.
func (c *Controller) reportCost(pool *crawlv1alpha1.ProxyPool) {
	u, cost := pool.Status.Usage, pool.Spec.Cost
	if u == nil || cost == nil {
		return
	}
	total, perThousand := costOf(u, cost), -1.0
	if u.Outcomes.OK > 0 {
		perThousand = total * 1000 / float64(u.Outcomes.OK)
	}
	c.metrics.SetPoolCost(pool.Namespace, pool.Name, cost.Currency, total, perThousand)
}

// costOf is usage at cost's prices.
func costOf(u *crawlv1alpha1.PoolUsage, cost *crawlv1alpha1.PoolCost) float64 {
	return parseDecimal(u.InstanceHours)*parseDecimal(cost.PerInstanceHour) + parseDecimal(u.TransferredGiB)*parseDecimal(cost.PerGiB)
}
