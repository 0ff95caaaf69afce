// Package crawlpolicy writes each CrawlPolicy's status on the leader: every
// rule's budget in use and how often callers waited or were refused
// (docs/politeness.md), from the lease store's counts; and the SiteBanning
// events of the sites its rules govern (sitebans.go). The feed that applies
// the policies to the store is pkg/lease/feed's; the budgets themselves are
// enforced by pkg/lease/store at grant time.
package crawlpolicy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/bandetect"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
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
	// bases are each policy's rule outcomes as its status had them when
	// this process first wrote it: the store counts from zero in each
	// process, and adds to them (writeAll is the only user).
	bases map[types.UID]map[string]crawlv1alpha1.OutcomeCounts

	// The SiteBanning events (WithSiteBanEvents): the store's blocks, where
	// to record, and the blocks announced already.
	siteBlocks SiteBlocks
	recorder   record.EventRecorder
	announced  map[siteBlockKey]bool
}

// NewStatusWriter writes every interval (0: DefaultStatusInterval), and
// soon after Poke.
func NewStatusWriter(client versioned.Interface, lister crawllisters.CrawlPolicyLister, stats Stats, interval time.Duration) *StatusWriter {
	if interval <= 0 {
		interval = DefaultStatusInterval
	}
	return &StatusWriter{client: client, lister: lister, stats: stats, interval: interval, pokes: make(chan struct{}, 1),
		bases: map[types.UID]map[string]crawlv1alpha1.OutcomeCounts{}}
}

// Poke asks for a write now: a policy was added or changed, and its
// observedGeneration should say so without waiting for the interval.
func (w *StatusWriter) Poke() {
	select {
	case w.pokes <- struct{}{}:
	default: // one is pending already
	}
}

// Run writes the status of every policy whose counts changed, and records
// the SiteBanning events, every interval and when poked, until ctx ends. Run it on the leader: only its
// store counts.
func (w *StatusWriter) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.writeAll(ctx)
		w.announceSiteBans(ctx)
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
	seen := map[types.UID]bool{}
	for _, p := range policies {
		seen[p.UID] = true
		base, ok := w.bases[p.UID]
		if !ok {
			base = map[string]crawlv1alpha1.OutcomeCounts{}
			for _, r := range p.Status.Rules {
				base[r.Host] = r.Outcomes
			}
			w.bases[p.UID] = base
		}
		want := StatusFrom(p, w.stats.CrawlPolicyStats(store.ObjectName(cache.MetaObjectToName(p))), base)
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
	for uid := range w.bases {
		if !seen[uid] {
			delete(w.bases, uid) // deleted: its counts go with it
		}
	}
}

// StatusFrom is a policy's status from its rules' counts, their outcomes
// added to base (by host), and the Valid condition from its ban rules.
func StatusFrom(p *crawlv1alpha1.CrawlPolicy, stats []store.RuleStats, base map[string]crawlv1alpha1.OutcomeCounts) crawlv1alpha1.CrawlPolicyStatus {
	st := crawlv1alpha1.CrawlPolicyStatus{ObservedGeneration: p.Generation, RuleCount: int32(len(stats))}
	var total crawlv1alpha1.OutcomeCounts
	for _, r := range stats {
		b := base[r.Host]
		o := withRate(crawlv1alpha1.OutcomeCounts{OK: b.OK + r.Outcomes.OK, Banned: b.Banned + r.Outcomes.Banned, Error: b.Error + r.Outcomes.Error})
		st.Rules = append(st.Rules, crawlv1alpha1.DomainRuleStatus{Host: r.Host, InUse: r.InUse, Waited: r.Waited, Refused: r.Refused, Outcomes: o,
			CurrentTier: r.Tier, Tiers: tiersStatus(r.Tiers), BusiestDomains: busiestStatus(r.BusiestDomains)})
		st.InUse += r.InUse
		st.Waited += r.Waited
		st.Refused += r.Refused
		total.OK, total.Banned, total.Error = total.OK+o.OK, total.Banned+o.Banned, total.Error+o.Error
	}
	st.Outcomes = withRate(total)
	st.Conditions = slices.Clone(p.Status.Conditions)
	setValid(&st, p)
	return st
}

// tiersStatus is a rule's tiers' use as status shows it (counted since
// the leader started).
func tiersStatus(ts []store.TierStats) []crawlv1alpha1.TierStatus {
	var out []crawlv1alpha1.TierStatus
	for _, t := range ts {
		out = append(out, crawlv1alpha1.TierStatus{Name: t.Name, Grants: t.Grants,
			Outcomes: withRate(crawlv1alpha1.OutcomeCounts{OK: t.Outcomes.OK, Banned: t.Outcomes.Banned, Error: t.Outcomes.Error})})
	}
	return out
}

func busiestStatus(ds []store.DomainTier) []crawlv1alpha1.DomainTierStatus {
	var out []crawlv1alpha1.DomainTierStatus
	for _, d := range ds {
		out = append(out, crawlv1alpha1.DomainTierStatus{Domain: d.Domain, Tier: d.Tier, Grants: d.Grants})
	}
	return out
}

// setValid sets the Valid condition: False, naming each field, while a
// ban rule or a rule's tiers cannot be applied as written (a pattern that
// is not RE2: the gateway ignores it and judges by the rest; a tier
// selector labels refuses: the rule is applied without tiers).
func setValid(st *crawlv1alpha1.CrawlPolicyStatus, p *crawlv1alpha1.CrawlPolicy) {
	var problems []string
	check := func(limits *crawlv1alpha1.DomainLimits, field string) {
		if limits == nil || limits.BanDetection == nil {
			return
		}
		_, errs := bandetect.Compile(limits.BanDetection, field+".banDetection")
		for _, e := range errs {
			problems = append(problems, e.Error())
		}
	}
	checkTiers := func(limits *crawlv1alpha1.DomainLimits, field string) {
		if limits == nil {
			return
		}
		if _, err := feed.TieringFrom(*limits, field); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for i := range p.Spec.Rules {
		check(&p.Spec.Rules[i].DomainLimits, fmt.Sprintf("spec.rules[%d]", i))
		checkTiers(&p.Spec.Rules[i].DomainLimits, fmt.Sprintf("spec.rules[%d]", i))
	}
	check(p.Spec.Default, "spec.default")
	checkTiers(p.Spec.Default, "spec.default")
	c := metav1.Condition{Type: crawlv1alpha1.CrawlPolicyConditionValid, Status: metav1.ConditionTrue, Reason: "Applied",
		Message: "every field is applied as written", ObservedGeneration: p.Generation}
	if len(problems) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, "InvalidField"
		c.Message = strings.Join(problems, "; ") + " (ignored; the rest of the policy applies)"
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// withRate fills in the success rate; empty before the first outcome.
func withRate(o crawlv1alpha1.OutcomeCounts) crawlv1alpha1.OutcomeCounts {
	o.SuccessRate = ""
	if total := o.OK + o.Banned + o.Error; total > 0 {
		o.SuccessRate = strconv.FormatFloat(100*float64(o.OK)/float64(total), 'f', 1, 64) + "%"
	}
	return o
}
