package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Outcomes are what happened to requests and leases, whoever saw it: a
// crawler's release through the lease API, or the gateway judging a
// response it can see (docs/politeness.md, "Ban detection"). Bans, cool-
// downs, recycling, success rates and cost all read them.

// BanDetection says what a ban looks like on the domains of a rule: a
// response the gateway can see (every plain-HTTP request; HTTPS only in a
// namespace that opted into inspection) that matches any of its signs is a
// ban of the IP that fetched it, for that domain. Unset on a rule: the
// default, statusCodes 401, 403 and 429.
type BanDetection struct {
	// StatusCodes that mean a ban. Unset: 401, 403, 429.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=100
	// +kubebuilder:validation:items:Maximum=599
	// +listType=set
	// +optional
	StatusCodes []int32 `json:"statusCodes,omitempty"`

	// BodyPatterns are RE2 regular expressions searched in the first
	// bodyBytes of a response's body (a 200 challenge page, say). An
	// invalid pattern is reported in the policy's Valid condition and
	// ignored.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	BodyPatterns []string `json:"bodyPatterns,omitempty"`

	// BodyBytes is how much of a body bodyPatterns search. Default 4096.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +optional
	BodyBytes *int32 `json:"bodyBytes,omitempty"`

	// Headers are response headers whose value, matched by an RE2 pattern,
	// means a ban (a vendor's block header, say).
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Headers []HeaderPattern `json:"headers,omitempty"`

	// MaxTimeToFirstByte: a response whose headers take longer than this
	// to arrive is a ban (a tarpit). Unset: time is not judged.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('10m')",message="must be between 10ms and 10m"
	// +optional
	MaxTimeToFirstByte *metav1.Duration `json:"maxTimeToFirstByte,omitempty"`

	// Retries is how many more times the gateway sends an idempotent
	// request (GET, HEAD or OPTIONS without a body) on a fresh IP after a
	// ban, invisibly to the crawler but for its response headers. Default 2.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	// +optional
	Retries *int32 `json:"retries,omitempty"`

	// Disabled: no response of these domains is judged; only a crawler's
	// release reports a ban.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// HeaderPattern is a response header and an RE2 pattern of its value.
type HeaderPattern struct {
	// Name is the header's name (case does not matter).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Name string `json:"name"`

	// Pattern is an RE2 regular expression of its value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Pattern string `json:"pattern"`
}

// OutcomeCounts counts outcomes: each response the gateway judged, and
// each lease a crawler released through the lease API, counts once.
type OutcomeCounts struct {
	// OK counts successes.
	// +optional
	OK int64 `json:"ok"`
	// Banned counts bans.
	// +optional
	Banned int64 `json:"banned"`
	// Error counts failures that were not bans (the proxy or target failed).
	// +optional
	Error int64 `json:"error"`
	// SuccessRate is ok over all outcomes, as a percentage ("97.5%"); empty
	// before the first outcome.
	// +optional
	SuccessRate string `json:"successRate,omitempty"`
}

// PoolCost is what a pool's members cost, as the user states it (the
// operator never guesses a price).
// +kubebuilder:validation:XValidation:rule="has(self.perInstanceHour) || has(self.perGiB)",message="spec.cost must set perInstanceHour or perGiB"
type PoolCost struct {
	// Currency is an ISO 4217 code (USD, EUR).
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	Currency string `json:"currency"`

	// PerInstanceHour is what one member costs per hour it exists, a
	// decimal such as "0.0104".
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	PerInstanceHour string `json:"perInstanceHour,omitempty"`

	// PerGiB is what a GiB through a member costs (a proxy network's
	// price), a decimal such as "4.00". Counted from the gateway's bytes.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	PerGiB string `json:"perGiB,omitempty"`
}

// PoolUsage is what a pool has used and what it cost, counted by the
// leader since the pool was created (a new leader goes on from the counts
// here).
type PoolUsage struct {
	// Outcomes are the outcomes of requests and leases on the members.
	// +optional
	Outcomes OutcomeCounts `json:"outcomes"`

	// InstanceHours is how long members have existed, summed, to the
	// ten-thousandth of an hour (0.36 s: the pool's status is written every
	// few seconds, and each write adds what passed since countedAt).
	// +optional
	InstanceHours string `json:"instanceHours,omitempty"`

	// CountedAt is when instanceHours was last brought up to date; the
	// next count adds the members' time since then, so a restart of the
	// operator loses none.
	// +optional
	CountedAt *metav1.Time `json:"countedAt,omitempty"`

	// TransferredGiB is how many GiB went through the members by the
	// gateway, to the hundredth.
	// +optional
	TransferredGiB string `json:"transferredGiB,omitempty"`

	// Cost is instanceHours and transferredGiB at spec.cost's prices, with its
	// currency ("12.34 USD"); empty without spec.cost.
	// +optional
	Cost string `json:"cost,omitempty"`

	// CostPer1000OK is cost per 1,000 successful outcomes ("0.52 USD");
	// empty without spec.cost or before the first success.
	// +optional
	CostPer1000OK string `json:"costPer1000OK,omitempty"`
}
