package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Recycling on evidence (spec.recycle): the lease store knows first-hand
// which member's instance the sites ban and how many leases it served; a
// member past either limit is stale like an out-of-date one, so it leaves
// through the same budget and drain as any replacement, and its successor
// is a new Proxy (a new name, a new instance, a new IP) with no cool-down.

const (
	// ReasonBurned: released banned for maxBannedDomains distinct domains within window.
	ReasonBurned Reason = "Burned"
	// ReasonUsedUp: granted maxLeases leases.
	ReasonUsedUp Reason = "UsedUp"
)

// EventRecycled is the event reason on the pool and on the member when
// spec.recycle takes a member out.
const EventRecycled = "Recycled"

// DefaultRecycleWindow is spec.recycle.window's default.
const DefaultRecycleWindow = time.Hour

// RecyclePoll is how often a pool with spec.recycle looks at its members'
// burn: a ban or a grant is no Kubernetes event.
const RecyclePoll = 5 * time.Second

// BurnCounter tells what each Proxy's current instance has been through:
// leases served and distinct domains banned within window (pkg/lease/store.Store).
// An error (the store is not leading) makes every count unknown, and
// nothing is recycled on evidence.
type BurnCounter interface {
	BurnByProxy(namespace string, window time.Duration) (map[string]store.Burn, error)
}

// RecyclePolicy is spec.recycle resolved; zero limits are off.
type RecyclePolicy struct {
	MaxBannedDomains int
	Window           time.Duration
	MaxLeases        int64
}

// Enabled says whether any limit is set.
func (r RecyclePolicy) Enabled() bool { return r.MaxBannedDomains > 0 || r.MaxLeases > 0 }

// RecycleReason is why m is recycled on evidence, "" if it is not. Burned
// comes first: a banned IP is worth replacing whatever its use.
func RecycleReason(r RecyclePolicy, m Member) Reason {
	switch {
	case r.MaxBannedDomains > 0 && m.BannedDomains >= r.MaxBannedDomains:
		return ReasonBurned
	case r.MaxLeases > 0 && m.Served >= r.MaxLeases:
		return ReasonUsedUp
	}
	return ""
}

// RecycleEvidence says, for events and conditions, what made m burned or
// used up.
func RecycleEvidence(r RecyclePolicy, reason Reason, m Member) string {
	switch reason {
	case ReasonBurned:
		return fmt.Sprintf("burned: %d distinct domains banned it within %s (maxBannedDomains %d)", m.BannedDomains, r.Window, r.MaxBannedDomains)
	case ReasonUsedUp:
		return fmt.Sprintf("used up: served %d leases (maxLeases %d)", m.Served, r.MaxLeases)
	case ReasonDuplicateExitIP:
		return fmt.Sprintf("exit IP %s is an older member's too", m.ExitIP)
	case ReasonExitCountryMismatch:
		return fmt.Sprintf("exit IP %s is in %s, but its network was asked for %s", m.ExitIP, m.ExitCountry, m.AskedCountry)
	}
	return ""
}

// recyclePolicyOf resolves spec.recycle, with errors naming the field for
// what the CRD schema would have refused.
func recyclePolicyOf(spec *crawlv1alpha1.PoolRecycle) (RecyclePolicy, error) {
	if spec == nil {
		return RecyclePolicy{}, nil
	}
	r := RecyclePolicy{Window: DefaultRecycleWindow}
	if spec.MaxBannedDomains != nil {
		if n := *spec.MaxBannedDomains; n < 1 || n > 100 {
			return RecyclePolicy{}, fmt.Errorf("spec.recycle.maxBannedDomains: %d is outside 1..100", n)
		}
		r.MaxBannedDomains = int(*spec.MaxBannedDomains)
	}
	if spec.MaxLeases != nil {
		if n := *spec.MaxLeases; n < 1 {
			return RecyclePolicy{}, fmt.Errorf("spec.recycle.maxLeases: %d is below 1", n)
		}
		r.MaxLeases = *spec.MaxLeases
	}
	if spec.Window != nil {
		if d := spec.Window.Duration; d < time.Second || d > 168*time.Hour {
			return RecyclePolicy{}, fmt.Errorf("spec.recycle.window: %s is outside 1s..168h", d)
		}
		r.Window = spec.Window.Duration
	}
	if !r.Enabled() {
		return RecyclePolicy{}, fmt.Errorf("spec.recycle: set maxBannedDomains or maxLeases")
	}
	return r, nil
}

// recycleState is the pool controller's part of recycling: where the burn
// comes from, how often to look, and the recycles counted but not yet in a
// written status (a conflict drops a status write; the count must not go
// with it).
type recycleState struct {
	burn BurnCounter
	poll time.Duration

	mu        sync.Mutex
	unwritten map[cache.ObjectName]crawlv1alpha1.PoolRecycleStatus
}

func newRecycleState(burn BurnCounter, poll time.Duration) recycleState {
	if poll <= 0 {
		poll = RecyclePoll
	}
	return recycleState{burn: burn, poll: poll, unwritten: map[cache.ObjectName]crawlv1alpha1.PoolRecycleStatus{}}
}

// addBurn fills in each member's Served and BannedDomains; unknown (no
// store, or it is not leading) leaves them zero, so nothing is recycled.
func (r *recycleState) addBurn(namespace string, pol RecyclePolicy, members []Member) {
	if !pol.Enabled() || r.burn == nil {
		return
	}
	burns, err := r.burn.BurnByProxy(namespace, pol.Window)
	if err != nil {
		return
	}
	for i := range members {
		if b, ok := burns[members[i].Name]; ok {
			members[i].Served, members[i].BannedDomains = b.Served, b.BannedDomains
		}
	}
}

func (r *recycleState) count(key cache.ObjectName, reason Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.unwritten[key]
	switch reason {
	case ReasonBurned:
		n.Burned++
	case ReasonUsedUp:
		n.UsedUp++
	}
	r.unwritten[key] = n
}

// written: a status is stored whose counts exceed the cached ones by
// what it staged; those are no longer unwritten. (A write that staged
// nothing, the template-error path, takes nothing off.)
func (r *recycleState) written(key cache.ObjectName, stored, cached crawlv1alpha1.PoolRecycleStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.unwritten[key]
	n.Burned -= stored.Burned - cached.Burned
	n.UsedUp -= stored.UsedUp - cached.UsedUp
	if n.Burned <= 0 && n.UsedUp <= 0 {
		delete(r.unwritten, key)
		return
	}
	r.unwritten[key] = crawlv1alpha1.PoolRecycleStatus{Burned: max(0, n.Burned), UsedUp: max(0, n.UsedUp)}
}

func (r *recycleState) forget(key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.unwritten, key)
}

// stageStatus sets status.recycled (the stored counts plus the unwritten
// ones) and the Recycling condition, which names the members leaving
// because of spec.recycle.
func (r *recycleState) stageStatus(pool, cached *crawlv1alpha1.ProxyPool, pol RecyclePolicy, plan Plan, byName map[string]*crawlv1alpha1.Proxy) {
	r.mu.Lock()
	add := r.unwritten[cache.MetaObjectToName(pool)]
	r.mu.Unlock()
	pool.Status.Recycled = crawlv1alpha1.PoolRecycleStatus{
		Burned: cached.Status.Recycled.Burned + add.Burned,
		UsedUp: cached.Status.Recycled.UsedUp + add.UsedUp,
	}
	if !pol.Enabled() {
		meta.RemoveStatusCondition(&pool.Status.Conditions, crawlv1alpha1.PoolConditionRecycling)
		return
	}
	leaving := map[string]Reason{}
	for name, p := range byName {
		if reason := Reason(p.Annotations[crawlv1alpha1.DrainReasonAnnotation]); isRecycle(reason) {
			leaving[name] = reason
		}
	}
	for _, d := range plan.Drain {
		if isRecycle(d.Reason) {
			leaving[d.Name] = d.Reason
		}
	}
	for _, d := range plan.Delete {
		if isRecycle(d.Reason) {
			leaving[d.Name] = d.Reason
		}
	}
	so := fmt.Sprintf("%d burned and %d used up recycled so far", pool.Status.Recycled.Burned, pool.Status.Recycled.UsedUp)
	if len(leaving) == 0 {
		setCondition(pool, crawlv1alpha1.PoolConditionRecycling, metav1.ConditionFalse, "WithinLimits",
			fmt.Sprintf("no member is %s; %s", describeLimits(pol), so))
		return
	}
	names := slices.Sorted(maps.Keys(leaving))
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s (%s)", n, leaving[n]))
	}
	setCondition(pool, crawlv1alpha1.PoolConditionRecycling, metav1.ConditionTrue, string(leaving[names[0]]),
		fmt.Sprintf("replacing %s; %s", strings.Join(parts, ", "), so))
}

func isRecycle(r Reason) bool { return r == ReasonBurned || r == ReasonUsedUp }

func describeLimits(pol RecyclePolicy) string {
	var parts []string
	if pol.MaxBannedDomains > 0 {
		parts = append(parts, fmt.Sprintf("burned (%d domains banned within %s)", pol.MaxBannedDomains, pol.Window))
	}
	if pol.MaxLeases > 0 {
		parts = append(parts, fmt.Sprintf("used up (%d leases served)", pol.MaxLeases))
	}
	return strings.Join(parts, " or ")
}

// noteRecycle tells that spec.recycle took member p out: the count for the
// pool's status, an event on the pool and on the member, and the member's
// Recycled condition. Only the count is essential; a failed condition
// write is logged, not retried (the member is leaving anyway).
func (c *Controller) noteRecycle(ctx context.Context, pool *crawlv1alpha1.ProxyPool, p *crawlv1alpha1.Proxy, reason Reason, evidence string) {
	if !isRecycle(reason) {
		return
	}
	c.recycle.count(cache.MetaObjectToName(pool), reason)
	instance := p.Status.ProviderID
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventRecycled, "Recycling member %s (instance %s): %s", p.Name, instance, evidence)
	c.recorder.Eventf(p, corev1.EventTypeNormal, EventRecycled, "Recycled by pool %s: %s; a new member with a new instance replaces it", pool.Name, evidence)
	klog.FromContext(ctx).Info("Recycling member", "member", p.Name, "instance", instance, "reason", reason, "evidence", evidence)
	cond := metav1.Condition{Type: crawlv1alpha1.ProxyConditionRecycled, Status: metav1.ConditionTrue, Reason: string(reason), Message: evidence}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if live.UID != p.UID {
			return nil
		}
		cond.ObservedGeneration = live.Generation
		if !meta.SetStatusCondition(&live.Status.Conditions, cond) {
			return nil
		}
		_, err = c.crawl.CrawlV1alpha1().Proxies(p.Namespace).UpdateStatus(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("Could not set the member's Recycled condition", "member", p.Name, "err", err)
	}
}
