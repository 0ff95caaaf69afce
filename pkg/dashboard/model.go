package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Lease is a live lease as the dashboard shows it. It has no ID, owner or
// state on purpose: whatever feeds the dashboard cannot hand it one.
type Lease struct {
	Namespace string
	Proxy     string
	Holder    string
	Domain    string
	GrantedAt time.Time
}

// Cooling is what one proxy is cooling down for: up to
// CoolingDomainsShown domains (the latest-ending first) of Total.
type Cooling struct {
	Namespace string
	Proxy     string
	Domains   []string
	Total     int
}

// CoolingDomainsShown is how many of a member's cool-down domains the
// view names; the rest are counted.
const CoolingDomainsShown = 5

// Inputs are what a View is built from: the informers' ProxyPools and
// Proxies, and the lease store's live leases (LeasesKnown is false on a
// replica that does not lead: only the leader knows the leases).
type Inputs struct {
	Pools       []*crawlv1alpha1.ProxyPool
	Policies    []*crawlv1alpha1.CrawlPolicy
	Proxies     []*crawlv1alpha1.Proxy
	Leases      []Lease
	LeasesKnown bool
	// Cooling are the leader's cool-downs in force (none on a standby).
	Cooling []Cooling
	// Events are the cached events; Build keeps those about
	// crawl.proxyfleet.io objects, the latest EventsPerNamespace of each
	// namespace.
	Events []*corev1.Event
}

// View is everything the page shows, for every namespace; Filter cuts it
// to what one viewer may list. Times are Unix milliseconds, so that the
// view changes only when the fleet does (the page computes ages).
type View struct {
	Pools       []PoolRow   `json:"pools"`
	Members     []MemberRow `json:"members"`
	Leases      []LeaseRow  `json:"leases"`
	Policies    []PolicyRow `json:"policies"`
	Events      []EventRow  `json:"events"`
	LeasesKnown bool        `json:"leasesKnown"`
}

// PolicyRow is one CrawlPolicy's status: its rules' use, as the leader
// last wrote it.
type PolicyRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Valid is the Valid condition's status and message ("" before the first status).
	Valid        string    `json:"valid"`
	ValidMessage string    `json:"validMessage"`
	Rules        []RuleRow `json:"rules"`
}

// RuleRow is one rule of a CrawlPolicy; Host is "*" for the default rule.
type RuleRow struct {
	Host        string `json:"host"`
	InUse       int64  `json:"inUse"`
	Waited      int64  `json:"waited"`
	Refused     int64  `json:"refused"`
	SuccessRate string `json:"successRate"`
	// Tier is the tier a named rule's next grant goes to; for the default
	// rule, its busiest domains' tiers ("domain: tier"); "" without tiers.
	Tier string `json:"tier"`
}

// busiestTiersShown is how many of the default rule's busiest domains
// the rule's row names with their tier.
const busiestTiersShown = 3

// PoolRow is one ProxyPool in the fleet view.
type PoolRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	Desired   int32  `json:"desired"`
	Members   int32  `json:"members"`
	Ready     int32  `json:"ready"`
	Available int32  `json:"available"`
	// Leased counts the live leases on its members.
	Leased int   `json:"leased"`
	Burned int64 `json:"burned"`
	UsedUp int64 `json:"usedUp"`
	// SuccessRate, Cost and CostPer1000OK are status.usage's, "" when unknown.
	SuccessRate string `json:"successRate"`
	// OK and Outcomes are status.usage's running totals (0 without it).
	OK            int64          `json:"ok"`
	Outcomes      int64          `json:"outcomes"`
	Cost          string         `json:"cost"`
	CostPer1000OK string         `json:"costPer1000OK"`
	Conditions    []ConditionRow `json:"conditions"`
}

// ConditionRow is one status condition.
type ConditionRow struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// MemberRow is one Proxy; Pool is "" for a Proxy of no pool.
type MemberRow struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	Pool          string `json:"pool"`
	Phase         string `json:"phase"`
	ExitIP        string `json:"exitIP"`
	ExitCountry   string `json:"exitCountry"`
	LatencyMillis int64  `json:"latencyMillis"`
	Leases        int    `json:"leases"`
	// CoolingDown names up to CoolingDomainsShown of the domains the member
	// keeps away from after a ban; CoolingDownTotal counts them all.
	CoolingDown      []string `json:"coolingDown"`
	CoolingDownTotal int      `json:"coolingDownTotal"`
	CreatedMillis    int64    `json:"createdMillis"`
	// Leaving says why the member is being replaced ("" if it is not):
	// the pool's drain reason, or spec.recycle's verdict, or deletion.
	Leaving string `json:"leaving"`
}

// LeaseRow is one live lease: who holds which proxy for which domain.
type LeaseRow struct {
	Namespace     string `json:"namespace"`
	Proxy         string `json:"proxy"`
	Pool          string `json:"pool"`
	Holder        string `json:"holder"`
	Domain        string `json:"domain"`
	GrantedMillis int64  `json:"grantedMillis"`
}

type objectKey struct{ namespace, name string }

// Build makes the View of in: rows sorted by namespace and name (leases by
// grant time), with the lease counts joined onto members and pools.
func Build(in Inputs) View {
	leasesPerProxy := map[objectKey]int{}
	for _, l := range in.Leases {
		leasesPerProxy[objectKey{l.Namespace, l.Proxy}]++
	}
	poolOf := map[objectKey]string{}
	leasesPerPool := map[objectKey]int{}
	v := View{Pools: []PoolRow{}, Members: []MemberRow{}, Leases: []LeaseRow{}, Policies: []PolicyRow{}, LeasesKnown: in.LeasesKnown}
	cooling := map[objectKey]Cooling{}
	for _, c := range in.Cooling {
		cooling[objectKey{c.Namespace, c.Proxy}] = c
	}
	for _, p := range in.Proxies {
		key := objectKey{p.Namespace, p.Name}
		m := memberRow(p, leasesPerProxy[key])
		if c, ok := cooling[key]; ok {
			m.CoolingDown, m.CoolingDownTotal = c.Domains[:min(len(c.Domains), CoolingDomainsShown)], c.Total
		}
		poolOf[objectKey{p.Namespace, p.Name}] = m.Pool
		if m.Pool != "" {
			leasesPerPool[objectKey{p.Namespace, m.Pool}] += m.Leases
		}
		v.Members = append(v.Members, m)
	}
	for _, p := range in.Pools {
		v.Pools = append(v.Pools, poolRow(p, leasesPerPool[objectKey{p.Namespace, p.Name}]))
	}
	for _, p := range in.Policies {
		v.Policies = append(v.Policies, policyRow(p))
	}
	v.Events = eventRows(in.Events, poolOf)
	for _, l := range in.Leases {
		v.Leases = append(v.Leases, LeaseRow{
			Namespace: l.Namespace, Proxy: l.Proxy, Pool: poolOf[objectKey{l.Namespace, l.Proxy}],
			Holder: l.Holder, Domain: l.Domain, GrantedMillis: l.GrantedAt.UnixMilli(),
		})
	}
	slices.SortFunc(v.Pools, func(a, b PoolRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(v.Policies, func(a, b PolicyRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(v.Members, func(a, b MemberRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Name, b.Name))
	})
	slices.SortStableFunc(v.Leases, func(a, b LeaseRow) int {
		return cmp.Or(cmp.Compare(a.GrantedMillis, b.GrantedMillis), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Proxy, b.Proxy))
	})
	return v
}

func poolRow(p *crawlv1alpha1.ProxyPool, leased int) PoolRow {
	row := PoolRow{
		Namespace: p.Namespace, Name: p.Name, Provider: string(p.Spec.Template.Spec.Provider),
		Members: p.Status.Replicas, Ready: p.Status.ReadyReplicas, Available: p.Status.AvailableReplicas,
		Leased: leased, Burned: p.Status.Recycled.Burned, UsedUp: p.Status.Recycled.UsedUp,
		Conditions: []ConditionRow{},
	}
	if p.Spec.Replicas != nil {
		row.Desired = *p.Spec.Replicas
	}
	if u := p.Status.Usage; u != nil {
		row.SuccessRate, row.Cost, row.CostPer1000OK = u.Outcomes.SuccessRate, u.Cost, u.CostPer1000OK
		row.OK, row.Outcomes = u.Outcomes.OK, u.Outcomes.OK+u.Outcomes.Banned+u.Outcomes.Error
	}
	for _, c := range p.Status.Conditions {
		row.Conditions = append(row.Conditions, ConditionRow{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	return row
}

func policyRow(p *crawlv1alpha1.CrawlPolicy) PolicyRow {
	row := PolicyRow{Namespace: p.Namespace, Name: p.Name, Rules: []RuleRow{}}
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.CrawlPolicyConditionValid); c != nil {
		row.Valid, row.ValidMessage = string(c.Status), c.Message
	}
	for _, r := range p.Status.Rules {
		row.Rules = append(row.Rules, RuleRow{Host: r.Host, InUse: r.InUse, Waited: r.Waited, Refused: r.Refused,
			SuccessRate: r.Outcomes.SuccessRate, Tier: ruleTier(r)})
	}
	return row
}

func memberRow(p *crawlv1alpha1.Proxy, leases int) MemberRow {
	return MemberRow{
		Namespace: p.Namespace, Name: p.Name, Pool: p.Labels[crawlv1alpha1.PoolLabel],
		Phase: string(p.Status.Phase), ExitIP: p.Status.ExitIP, ExitCountry: p.Status.ExitCountry, LatencyMillis: p.Status.LatencyMillis,
		Leases: leases, CreatedMillis: p.CreationTimestamp.UnixMilli(), Leaving: leaving(p),
	}
}

// leaving is why p is being replaced, "" if it is not.
func leaving(p *crawlv1alpha1.Proxy) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ProxyConditionRecycled); c != nil && c.Status == "True" {
		return "Recycled: " + c.Reason
	}
	if reason, ok := p.Annotations[crawlv1alpha1.DrainReasonAnnotation]; ok {
		return "Draining: " + reason
	}
	if _, ok := p.Annotations[crawlv1alpha1.DrainingAnnotation]; ok {
		return "Draining"
	}
	if p.DeletionTimestamp != nil {
		return "Deleting"
	}
	return ""
}

// Namespaces are the namespaces v shows anything of, sorted.
func (v View) Namespaces() []string {
	var out []string
	for _, p := range v.Pools {
		out = append(out, p.Namespace)
	}
	for _, m := range v.Members {
		out = append(out, m.Namespace)
	}
	for _, l := range v.Leases {
		out = append(out, l.Namespace)
	}
	for _, p := range v.Policies {
		out = append(out, p.Namespace)
	}
	for _, e := range v.Events {
		out = append(out, e.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Filter is v cut to the namespaces visible says the viewer may list.
func Filter(v View, visible func(namespace string) bool) View {
	keep := func(ns string) bool { return visible(ns) }
	out := View{LeasesKnown: v.LeasesKnown}
	out.Pools = filtered(v.Pools, func(p PoolRow) bool { return keep(p.Namespace) })
	out.Members = filtered(v.Members, func(m MemberRow) bool { return keep(m.Namespace) })
	out.Leases = filtered(v.Leases, func(l LeaseRow) bool { return keep(l.Namespace) })
	out.Policies = filtered(v.Policies, func(p PolicyRow) bool { return keep(p.Namespace) })
	out.Events = filtered(v.Events, func(e EventRow) bool { return keep(e.Namespace) })
	return out
}

func filtered[T any](rows []T, keep func(T) bool) []T {
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// ruleTier is a rule's current tier, or its busiest domains' tiers.
func ruleTier(r crawlv1alpha1.DomainRuleStatus) string {
	if r.CurrentTier != "" || len(r.BusiestDomains) == 0 {
		return r.CurrentTier
	}
	var parts []string
	for _, d := range r.BusiestDomains[:min(len(r.BusiestDomains), busiestTiersShown)] {
		parts = append(parts, d.Domain+": "+d.Tier)
	}
	if more := len(r.BusiestDomains) - busiestTiersShown; more > 0 {
		parts = append(parts, fmt.Sprintf("+%d", more))
	}
	return strings.Join(parts, ", ")
}
