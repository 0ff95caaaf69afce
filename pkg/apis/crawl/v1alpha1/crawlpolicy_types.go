package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpol,categories=crawl
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.ruleCount`,description="Rules, the default one included"
// +kubebuilder:printcolumn:name="In-use",type=integer,JSONPath=`.status.inUse`,description="Leases the rules' budgets hold now"
// +kubebuilder:printcolumn:name="Waited",type=integer,JSONPath=`.status.waited`,description="Acquires that had to wait for a rule's budget"
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refused`,description="Acquires refused with 429 for a rule's budget"
// +kubebuilder:printcolumn:name="Success",type=string,JSONPath=`.status.outcomes.successRate`,priority=1,description="Successful outcomes over all, on the rules' domains"
// +kubebuilder:printcolumn:name="Banned",type=integer,JSONPath=`.status.outcomes.banned`,priority=1,description="Outcomes judged or reported as bans"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// CrawlPolicy makes the fleet crawl a domain like one careful client: the
// lease store grants a lease for a domain only within the budget of the
// rule that matches it (at most so many leases at once, no two grants
// closer than an interval), whichever worker asks and whichever proxy it
// gets. It binds leases on the proxies of its own namespace
// (docs/politeness.md).
type CrawlPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the rules.
	Spec CrawlPolicySpec `json:"spec"`

	// Status is how the budgets are used, as the lease store's leader last
	// reported it.
	// +optional
	Status CrawlPolicyStatus `json:"status,omitempty"`
}

// CrawlPolicySpec is the per-domain rules.
// +kubebuilder:validation:XValidation:rule="has(self.rules) || has(self.default)",message="spec: set rules, default, or both"
type CrawlPolicySpec struct {
	// Rules bind the domains they match: an exact host (shop.example.com)
	// or a suffix (*.example.com: example.com and every subdomain), one
	// budget for everything a rule matches. The most specific rule wins:
	// an exact host, then the longest suffix.
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Rules []DomainRule `json:"rules,omitempty"`

	// Default binds every domain no rule matches, each domain with a
	// budget of its own. Unset: such domains are not limited.
	// +optional
	Default *DomainLimits `json:"default,omitempty"`
}

// DomainRule is the limits of the domains that match host.
type DomainRule struct {
	// Host is an exact host name or *.suffix; lower case, no port.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Host string `json:"host"`

	DomainLimits `json:",inline"`
}

// DomainLimits is one budget, and what a ban looks like. Unset limits do
// not bind.
// +kubebuilder:validation:XValidation:rule="has(self.maxConcurrent) || has(self.minInterval) || has(self.minIntervalPerProxy) || has(self.banDetection) || has(self.tiers)",message="set maxConcurrent, minInterval, minIntervalPerProxy, banDetection or tiers"
// +kubebuilder:validation:XValidation:rule="!has(self.tiering) || has(self.tiers)",message="tiering needs tiers"
type DomainLimits struct {
	// MaxConcurrent is how many live leases for the domain the fleet holds
	// at most.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`

	// MinInterval is the least time between two grants for the domain,
	// fleet-wide (Go duration).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('24h')",message="must be between 1ms and 24h"
	// +optional
	MinInterval *metav1.Duration `json:"minInterval,omitempty"`

	// MinIntervalPerProxy is the least time between two grants for the
	// domain on one proxy (Go duration).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('24h')",message="must be between 1ms and 24h"
	// +optional
	MinIntervalPerProxy *metav1.Duration `json:"minIntervalPerProxy,omitempty"`

	// BanDetection says what a ban looks like on these domains, for the
	// gateway to judge the responses it sees. Unset: 401, 403 and 429.
	// +optional
	BanDetection *BanDetection `json:"banDetection,omitempty"`

	// Tiers are selectors of the namespace's proxies, cheapest first: a
	// lease for the domains starts on the first tier's proxies and moves
	// to the next where bans show the cheaper one is blocked
	// (docs/tiers.md). An acquire that names its own selector is not
	// tiered. Unset: any proxy, as before.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.name == t.name))",message="tier names must be unique"
	// +optional
	Tiers []ProxyTier `json:"tiers,omitempty"`

	// Tiering says when a budget moves between its tiers. Unset: the
	// defaults of each field.
	// +optional
	Tiering *Tiering `json:"tiering,omitempty"`
}

// ProxyTier is one tier: the proxies a selector picks.
type ProxyTier struct {
	// Name names the tier in status and metrics (own-vms, residential).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Selector picks the tier's proxies among the namespace's, for
	// example matchLabels crawl.proxyfleet.io/pool: own-vms (a pool labels
	// its members with its name).
	Selector metav1.LabelSelector `json:"selector"`
}

// Tiering says when a budget escalates to a dearer tier and when it steps
// back down.
type Tiering struct {
	// Window is how long outcomes at the current tier are counted before
	// the count starts afresh (Go duration). Default 2m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="must be between 1s and 24h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`

	// BanRateThreshold: bans over bans and successes in a window above it
	// escalate to the next tier; a decimal between 0 and 1. Default "0.5".
	// +kubebuilder:validation:Pattern=`^0?\.[0-9]{0,5}[1-9]$`
	// +optional
	BanRateThreshold string `json:"banRateThreshold,omitempty"`

	// MinOutcomes is the least outcomes in a window before it may
	// escalate, and of a probe before it may step down. Default 5.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MinOutcomes *int32 `json:"minOutcomes,omitempty"`

	// QuietPeriod is how long a budget stays on a tier above the first
	// before it probes the tier below (Go duration). Default 10m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="must be between 1s and 24h"
	// +optional
	QuietPeriod *metav1.Duration `json:"quietPeriod,omitempty"`

	// ProbeShare is the share of grants that try the tier below while
	// probing; a decimal above 0, at most 1. Default "0.05".
	// +kubebuilder:validation:Pattern=`^(0?\.[0-9]{0,5}[1-9]|1(\.0*)?)$`
	// +optional
	ProbeShare string `json:"probeShare,omitempty"`
}

// CrawlPolicyStatus is the budgets' use.
type CrawlPolicyStatus struct {
	// ObservedGeneration is the spec generation the lease store applies.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// RuleCount is how many rules the store applies, the default included.
	// +optional
	RuleCount int32 `json:"ruleCount,omitempty"`

	// InUse, Waited and Refused sum Rules.
	// +optional
	InUse int64 `json:"inUse,omitempty"`
	// +optional
	Waited int64 `json:"waited,omitempty"`
	// +optional
	Refused int64 `json:"refused,omitempty"`

	// Outcomes sum Rules' outcomes.
	// +optional
	Outcomes OutcomeCounts `json:"outcomes"`

	// Conditions: Valid (False while a field cannot be applied as written,
	// such as a pattern that is not RE2; its message names the field).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Rules is each rule's use; the default rule's host is "*".
	// +listType=map
	// +listMapKey=host
	// +optional
	Rules []DomainRuleStatus `json:"rules,omitempty"`
}

// CrawlPolicyConditionValid is False while a field of the policy cannot be
// applied as written; its message names the field.
const CrawlPolicyConditionValid = "Valid"

// DomainRuleStatus is one rule's use since the leader started.
type DomainRuleStatus struct {
	// Host is the rule's host, "*" for the default rule.
	Host string `json:"host"`
	// InUse is the live leases the rule's budget holds now.
	InUse int64 `json:"inUse"`
	// Waited counts acquires that waited for the budget.
	Waited int64 `json:"waited"`
	// Refused counts acquires refused (429) for the budget.
	Refused int64 `json:"refused"`
	// Outcomes are the outcomes of requests and leases on the rule's
	// domains.
	// +optional
	Outcomes OutcomeCounts `json:"outcomes"`

	// CurrentTier is the tier a named rule's next grant goes to; empty for
	// a rule without tiers and for the default rule (see busiestDomains).
	// +optional
	CurrentTier string `json:"currentTier,omitempty"`

	// Tiers is each tier's grants and outcomes since the leader started.
	// +listType=atomic
	// +optional
	Tiers []TierStatus `json:"tiers,omitempty"`

	// BusiestDomains is the default rule's domains with the most grants
	// among the 1,024 it used most recently, at most 10, and the tier of
	// each.
	// +listType=atomic
	// +optional
	BusiestDomains []DomainTierStatus `json:"busiestDomains,omitempty"`
}

// TierStatus is one tier's use.
type TierStatus struct {
	// Name is the tier's name.
	Name string `json:"name"`
	// Grants counts the leases granted on the tier.
	Grants int64 `json:"grants"`
	// Outcomes are the outcomes on the tier's proxies.
	// +optional
	Outcomes OutcomeCounts `json:"outcomes"`
}

// DomainTierStatus is one default-rule domain's tier.
type DomainTierStatus struct {
	// Domain is the domain.
	Domain string `json:"domain"`
	// Tier is its current tier's name.
	Tier string `json:"tier"`
	// Grants counts its grants since the leader first kept its tier.
	Grants int64 `json:"grants"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// CrawlPolicyList is a list of CrawlPolicies.
type CrawlPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the policies.
	Items []CrawlPolicy `json:"items"`
}
