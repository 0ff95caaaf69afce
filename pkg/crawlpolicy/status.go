// Package crawlpolicy writes each CrawlPolicy's status on the leader: every
// rule's budget in use and how often callers waited or were refused
// (docs/politeness.md), from the lease store's counts. The feed that applies
// the policies to the store is pkg/lease/feed's; the budgets themselves are
// enforced by pkg/lease/store at grant time.
package crawlpolicy

import (
	"context"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// DefaultStatusInterval is how often the leader writes the policies'
// status when it changed: counts are news, not events.
const DefaultStatusInterval = 5 * time.Second

// Stats is what the status writer needs of the lease store: each rule's
// counts (pkg/lease/store.Store implements it).
type Stats interface {
	CrawlPolicyStats(store.ObjectName) []store.RuleStats
}

// StatusWriter writes each CrawlPolicy's status from the store's counts.
type StatusWriter struct {
	client   versioned.Interface
	lister   crawllisters.CrawlPolicyLister
	stats    Stats
	interval time.Duration
	pokes    chan struct{}
}

// NewStatusWriter writes every interval (0: DefaultStatusInterval), and
// soon after Poke.
func NewStatusWriter(client versioned.Interface, lister crawllisters.CrawlPolicyLister, stats Stats, interval time.Duration) *StatusWriter {
	if interval <= 0 {
		interval = DefaultStatusInterval
	}
	return &StatusWriter{client: client, lister: lister, stats: stats, interval: interval, pokes: make(chan struct{}, 1)}
}

// Poke asks for a write now: a policy was added or changed, and its
// observedGeneration should say so without waiting for the interval.
func (w *StatusWriter) Poke() {
	select {
	case w.pokes <- struct{}{}:
	default: // one is pending already
	}
}

// Run writes the status of every policy whose counts changed, every
// interval and when poked, until ctx ends. Run it on the leader: only its
// store counts.
func (w *StatusWriter) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.writeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-w.pokes:
		}
	}
}

func (w *StatusWriter) writeAll(ctx context.Context) {
	policies, err := w.lister.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing crawl policies")
		return
	}
	for _, p := range policies {
		want := StatusFrom(p.Generation, w.stats.CrawlPolicyStats(store.ObjectName(cache.MetaObjectToName(p))))
		if apiequality.Semantic.DeepEqual(p.Status, want) {
			continue
		}
		updated := p.DeepCopy()
		updated.Status = want
		_, err := w.client.CrawlV1alpha1().CrawlPolicies(p.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			// The next round tries again; a conflict is a newer object.
			klog.FromContext(ctx).Error(err, "Writing crawl policy status", "policy", klog.KObj(p))
		}
	}
}

// StatusFrom is a policy's status from its rules' counts.
func StatusFrom(generation int64, stats []store.RuleStats) crawlv1alpha1.CrawlPolicyStatus {
	st := crawlv1alpha1.CrawlPolicyStatus{ObservedGeneration: generation, RuleCount: int32(len(stats))}
	for _, r := range stats {
		st.Rules = append(st.Rules, crawlv1alpha1.DomainRuleStatus{Host: r.Host, InUse: r.InUse, Waited: r.Waited, Refused: r.Refused})
		st.InUse += r.InUse
		st.Waited += r.Waited
		st.Refused += r.Refused
	}
	return st
}
