package pool

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// The I/O around Autoscale: measuring a pool's demand (its members' held
// slots from LeaseCounter, waiting and refused acquires from the lease
// store), writing spec.replicas through the scale subresource, the
// Autoscaling condition, status.demand, events and metrics.

// DemandPoll is how often a pool looks at its demand again: leases granted
// and released are no Kubernetes events. New waiters and refusals enqueue
// the pools they would match at once (NotifyDemand).
const DemandPoll = 5 * time.Second

// DemandSource is the lease store's view of waiting and refused acquires.
type DemandSource interface {
	Demand(namespace string, members labels.Labels) (store.WaitDemand, error)
	NotifyDemand(func(namespace string, sel labels.Selector))
}

// DemandMetrics, when the Metrics implement it too, receives each pool's
// demand (see pkg/metrics).
type DemandMetrics interface {
	SetPoolDemand(namespace, pool string, held, waiting, refused int)
}

// autoscaler is the controller's memory of each autoscaled pool.
type autoscaler struct {
	mu        sync.Mutex
	histories map[cache.ObjectName]AutoscaleHistory
	// written is the resourceVersion of our last scale write per pool,
	// until the informer shows it.
	written map[cache.ObjectName]uint64
}

// behind reports whether the cached pool (at resourceVersion rv) is older
// than our last scale write to it: a sync on it would act on the old size
// (and, for a scale-up, take the members just created for surplus).
func (a *autoscaler) behind(key cache.ObjectName, rv string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.written[key]
	if !ok {
		return false
	}
	cached, err := strconv.ParseUint(rv, 10, 64)
	if err == nil && cached < w {
		return true
	}
	delete(a.written, key)
	return false
}

func (a *autoscaler) wrote(key cache.ObjectName, rv string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	if a.written == nil {
		a.written = map[cache.ObjectName]uint64{}
	}
	a.written[key] = n
}

func (a *autoscaler) history(key cache.ObjectName) AutoscaleHistory {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.histories[key]
}

func (a *autoscaler) keep(key cache.ObjectName, h AutoscaleHistory) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.histories == nil {
		a.histories = map[cache.ObjectName]AutoscaleHistory{}
	}
	a.histories[key] = h
}

func (a *autoscaler) forget(key cache.ObjectName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.histories, key)
	delete(a.written, key)
}

// onDemand enqueues the autoscaled pools a new waiter or refusal would be
// served by, so that a pool at zero members scales up at once.
func (c *Controller) onDemand(namespace string, sel labels.Selector) {
	pools, err := c.pools.List(labels.Everything())
	if namespace != "" {
		pools, err = c.pools.ProxyPools(namespace).List(labels.Everything())
	}
	if err != nil {
		return
	}
	for _, p := range pools {
		if p.Spec.Autoscaling == nil || p.DeletionTimestamp != nil {
			continue
		}
		if sel == nil || sel.Matches(labels.Set(memberLabels(p, p.Status.Revision))) {
			c.queue.Add(cache.MetaObjectToName(p))
		}
	}
}

// measureDemand is the pool's demand now; ok is false when it is unknown
// (the lease store does not lead).
func (c *Controller) measureDemand(pool *crawlv1alpha1.ProxyPool, revision string, members []Member) (d Demand, capacity int, ok bool) {
	if c.leases == nil || c.demand == nil {
		return Demand{}, 0, false
	}
	slots := slotsPerMember(pool)
	for _, m := range members {
		if m.Leases < 0 {
			return Demand{}, 0, false
		}
		d.Held += m.Leases
		if m.Ready && m.active() {
			capacity += slots
		}
	}
	w, err := c.demand.Demand(pool.Namespace, labels.Set(memberLabels(pool, revision)))
	if err != nil {
		return Demand{}, 0, false
	}
	d.Waiting, d.Refused = w.Waiting, w.Refused
	return d, capacity, true
}

func slotsPerMember(pool *crawlv1alpha1.ProxyPool) int {
	return max(1, int(pool.Spec.Template.Spec.MaxLeases))
}

// autoscalePolicyOf resolves spec.autoscaling with its defaults.
func autoscalePolicyOf(pool *crawlv1alpha1.ProxyPool) AutoscalePolicy {
	a := pool.Spec.Autoscaling
	pol := AutoscalePolicy{
		Min: int(ptr.Deref(a.MinReplicas, 0)), Max: int(a.MaxReplicas),
		TargetPercent:  int(ptr.Deref(a.TargetUtilization, 80)),
		SlotsPerMember: slotsPerMember(pool),
		ScaleDownDelay: 5 * time.Minute,
		ScaleUpMaxStep: int(ptr.Deref(a.ScaleUp.MaxStep, 4)),
		ScaleUpPercent: int(ptr.Deref(a.ScaleUp.Percent, 100)),
		ScaleUpPeriod:  15 * time.Second,
	}
	if a.ScaleDownDelay != nil {
		pol.ScaleDownDelay = a.ScaleDownDelay.Duration
	}
	if a.ScaleUp.Period != nil {
		pol.ScaleUpPeriod = a.ScaleUp.Period.Duration
	}
	pol.Max = max(pol.Max, 1)
	pol.Min = min(pol.Min, pol.Max)
	return pol
}

// autoscale measures the pool's demand and, with spec.autoscaling, writes
// the size it asks for through the scale subresource. On a write, pool's
// spec.replicas and resourceVersion become the written ones, so that this
// sync goes on with the new size. It returns when time alone changes the
// decision (0: never).
func (c *Controller) autoscale(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string, members []Member, now time.Time) (time.Duration, error) {
	key := cache.MetaObjectToName(pool)
	d, capacity, known := c.measureDemand(pool, revision, members)
	if known {
		if dm, ok := c.metrics.(DemandMetrics); ok {
			dm.SetPoolDemand(pool.Namespace, pool.Name, d.Held, d.Waiting, d.Refused)
		}
	}
	if pool.Spec.Autoscaling == nil {
		c.autoscalers.forget(key)
		pool.Status.Demand = nil
		meta.RemoveStatusCondition(&pool.Status.Conditions, crawlv1alpha1.PoolConditionAutoscaling)
		return 0, nil
	}
	status := pool.Status.Demand
	if status == nil {
		status = &crawlv1alpha1.PoolDemand{}
		pool.Status.Demand = status
	}
	if !known {
		setCondition(pool, crawlv1alpha1.PoolConditionAutoscaling, metav1.ConditionFalse, ReasonDemandUnknown,
			"the lease store does not lead yet (or lost its term): spec.replicas stays as it is until demand is known")
		return 0, nil
	}
	status.Held, status.Capacity, status.Waiting, status.Refused = int32(d.Held), int32(capacity), int32(d.Waiting), int32(d.Refused)

	current := int(ptr.Deref(pool.Spec.Replicas, 1))
	dec, h := Autoscale(autoscalePolicyOf(pool), current, d, c.autoscalers.history(key), now)
	status.DesiredReplicas = ptr.To(int32(dec.Wanted))
	setCondition(pool, crawlv1alpha1.PoolConditionAutoscaling, metav1.ConditionTrue, dec.Reason, dec.Message)
	if dec.Desired == current {
		c.autoscalers.keep(key, h)
		return dec.RequeueAfter, nil
	}
	// The history keeps a scale-up only once it is written: a conflict must
	// not count against the next period's bound.

	scale := &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace, ResourceVersion: pool.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: int32(dec.Desired)},
	}
	written, err := c.crawl.CrawlV1alpha1().ProxyPools(pool.Namespace).UpdateScale(ctx, pool.Name, scale, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else wrote the pool; its event brings the key back.
		return 0, nil
	}
	if err != nil {
		err = fmt.Errorf("writing spec.replicas %d through the scale subresource: %w", dec.Desired, err)
		if setCondition(pool, crawlv1alpha1.PoolConditionAutoscaling, metav1.ConditionFalse, ReasonFailedScale, err.Error()) {
			c.recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedScale, "%v", err)
		}
		return 0, err
	}
	c.autoscalers.keep(key, h)
	c.autoscalers.wrote(key, written.ResourceVersion)
	pool.Spec.Replicas = ptr.To(written.Spec.Replicas)
	pool.ResourceVersion = written.ResourceVersion
	status.LastScaleTime = &metav1.Time{Time: now}
	verb := "up"
	if dec.Desired < current {
		verb = "down"
	}
	klog.FromContext(ctx).Info("Autoscaled", "from", current, "to", dec.Desired, "reason", dec.Reason, "held", d.Held, "waiting", d.Waiting, "refused", d.Refused)
	c.recorder.Eventf(pool, corev1.EventTypeNormal, "Autoscaled", "Scaled %s from %d to %d (%s): %s", verb, current, dec.Desired, dec.Reason, dec.Message)
	return dec.RequeueAfter, nil
}

// demandPollFor is how soon the pool looks at its demand again: every
// DemandPoll while demand can be measured (held slots change without an
// event; the demand metric follows them), else never.
func (c *Controller) demandPollFor(*crawlv1alpha1.ProxyPool) time.Duration {
	if c.demand == nil || c.leases == nil {
		return 0
	}
	return c.demandPoll
}

// cacheBehindScaleWrite is sync's guard: true while the informer has not
// shown the pool's own last scale write (autoscale_sync.go).
func (c *Controller) cacheBehindScaleWrite(pool *crawlv1alpha1.ProxyPool) bool {
	return c.autoscalers.behind(cache.MetaObjectToName(pool), pool.ResourceVersion)
}
