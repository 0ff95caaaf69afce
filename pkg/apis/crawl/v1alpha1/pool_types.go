package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=pxp,categories=crawl
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="Members the pool should have"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`,description="Members whose phase is Ready"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`,description="Ready members that are not draining: what the lease API can hand out"
// +kubebuilder:printcolumn:name="Up-to-date",type=integer,JSONPath=`.status.updatedReplicas`,description="Members built from the current template revision"
// +kubebuilder:printcolumn:name="Burned",type=integer,JSONPath=`.status.recycled.burned`,priority=1,description="Members recycled because sites banned them (spec.recycle.maxBannedDomains)"
// +kubebuilder:printcolumn:name="Used-up",type=integer,JSONPath=`.status.recycled.usedUp`,priority=1,description="Members recycled because they served spec.recycle.maxLeases leases"
// +kubebuilder:printcolumn:name="Held",type=integer,priority=1,JSONPath=`.status.demand.held`,description="Lease slots held on the members"
// +kubebuilder:printcolumn:name="Waiting",type=integer,priority=1,JSONPath=`.status.demand.waiting`,description="Acquires waiting for a slot a member would fill"
// +kubebuilder:printcolumn:name="Wanted",type=integer,priority=1,JSONPath=`.status.demand.desiredReplicas`,description="Members the autoscaler asks for (spec.autoscaling)"
// +kubebuilder:printcolumn:name="Success",type=string,priority=1,JSONPath=`.status.usage.outcomes.successRate`,description="Successful outcomes over all on the members"
// +kubebuilder:printcolumn:name="Cost/1k",type=string,priority=1,JSONPath=`.status.usage.costPer1000OK`,description="Cost per 1,000 successful outcomes (spec.cost)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ProxyPool is a fleet of Managed proxies made from one template: it keeps
// spec.replicas members, replaces out-of-date, too old and unhealthy members
// a few at a time (never taking the fleet down), and drains a member's
// leases before deleting it. Members are Proxies owned by the pool and
// labelled crawl.proxyfleet.io/pool=<pool name>.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 57",message="metadata.name must be at most 57 characters: member names add a 6-character suffix and the name is a label value"
type ProxyPool struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired fleet.
	Spec ProxyPoolSpec `json:"spec"`

	// Status is the fleet as the operator last observed it.
	// +optional
	Status ProxyPoolStatus `json:"status,omitempty"`
}

// ProxyPoolSpec is the desired state of a ProxyPool.
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.mode) || self.template.spec.mode != 'External' || has(self.membersPerInstance)",message="spec.template.spec.mode must be Managed: a pool makes its members' instances (External only with spec.membersPerInstance, members then being sessions on it)",fieldPath=".template.spec.mode",reason=FieldValueForbidden
type ProxyPoolSpec struct {
	// Replicas is how many members the pool keeps (the scale subresource
	// sets it, so kubectl scale, an HPA or KEDA can drive it).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Template is what every member is made from. Changing it, or the
	// content of a Secret it references (cloud-init or auth), makes every
	// member out of date; they are then replaced within spec.strategy.
	Template ProxyTemplate `json:"template"`

	// Strategy bounds how fast members are replaced.
	// +kubebuilder:default={}
	// +optional
	Strategy PoolStrategy `json:"strategy,omitempty"`

	// MaxAge recycles a member older than this (a new instance, so a new
	// IP), within spec.strategy. Each member is recycled up to a tenth
	// earlier, at random, so that a pool created at once does not recycle
	// at once and no member outlives maxAge. Unset: members live until
	// something else replaces them. At least 10s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="spec.maxAge must be at least 10s"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// DrainTimeout bounds how long a member chosen for removal waits for its
	// leases to end: meanwhile it takes no new lease and its live leases keep
	// renewing; then it is deleted. 0s deletes at once.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// Remediation replaces members that stay Unhealthy.
	// +kubebuilder:default={}
	// +optional
	Remediation PoolRemediation `json:"remediation,omitempty"`

	// Recycle replaces members on the lease store's evidence: burned by
	// bans, or used up (see PoolRecycle). Unset: never.
	// +optional
	Recycle *PoolRecycle `json:"recycle,omitempty"`

	// Autoscaling sizes the pool from its lease demand; the operator then
	// owns spec.replicas (see PoolAutoscaling).
	// +optional
	Autoscaling *PoolAutoscaling `json:"autoscaling,omitempty"`

	// Cost is what the members cost, for status.usage's cost and cost per
	// 1,000 successes. Unset: no cost is reported.
	// +optional
	Cost *PoolCost `json:"cost,omitempty"`

	// MembersPerInstance, when set, makes every member a session on a
	// shared instance (docs/ipv6.md): the template then describes the
	// instance (a Proxy with exit ranges), the pool keeps
	// ceil(replicas/membersPerInstance) instances and replicas members, each
	// member a session-provider Proxy on the instance with the fewest
	// members. Recycling a member is a new session, a new exit address, not
	// a new instance. Unset: every member is its own instance. With an
	// External template every instance Proxy names the same proxy: set it
	// to at least spec.replicas, so that there is one.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MembersPerInstance *int32 `json:"membersPerInstance,omitempty"`
}

// ProxyTemplate is the metadata and spec of every member.
type ProxyTemplate struct {
	// Metadata holds the labels and annotations every member carries. The
	// pool adds crawl.proxyfleet.io/pool and crawl.proxyfleet.io/pool-revision.
	// +optional
	Metadata TemplateMetadata `json:"metadata,omitempty"`

	// Spec is every member's Proxy spec (with spec.membersPerInstance:
	// every instance's). Members are Managed: mode External is rejected,
	// unless the members are sessions on it (spec.membersPerInstance).
	Spec ProxySpec `json:"spec"`
}

// TemplateMetadata is the part of a member's metadata the template sets.
type TemplateMetadata struct {
	// Labels are added to every member; the lease API's selectors match them.
	// +kubebuilder:validation:XValidation:rule="!('crawl.proxyfleet.io/pool' in self) && !('crawl.proxyfleet.io/pool-revision' in self)",message="spec.template.metadata.labels must not set crawl.proxyfleet.io/pool or crawl.proxyfleet.io/pool-revision: the pool sets them"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are added to every member.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PoolStrategy bounds a rollout, as a Deployment's rolling update does.
// +kubebuilder:validation:XValidation:rule="!has(self.maxSurge) || !has(self.maxUnavailable) || !(string(self.maxSurge) in ['0', '0%'] && string(self.maxUnavailable) in ['0', '0%'])",message="spec.strategy.maxSurge and spec.strategy.maxUnavailable must not both be zero: nothing could ever be replaced",fieldPath=".maxSurge"
type PoolStrategy struct {
	// MaxSurge is how many members may exist above spec.replicas while
	// members are replaced: a number, or a percentage of replicas rounded up.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? int(self) >= 0 : string(self).matches('^[0-9]+%$')",message="spec.strategy.maxSurge must be a non-negative number or a percentage such as 25%"
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// MaxUnavailable is how many members may be unavailable (not Ready, or
	// draining) below spec.replicas while members are replaced: a number,
	// or a percentage of replicas rounded down.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? int(self) >= 0 : string(self).matches('^[0-9]+%$')",message="spec.strategy.maxUnavailable must be a non-negative number or a percentage such as 25%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// PoolRemediation says when an unhealthy member is replaced, and when the
// pool should suspect the probe target or the network instead.
type PoolRemediation struct {
	// UnhealthyTimeout is how long a member may stay Unhealthy before it is
	// replaced.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.remediation.unhealthyTimeout must be above zero"
	// +optional
	UnhealthyTimeout *metav1.Duration `json:"unhealthyTimeout,omitempty"`

	// MaxUnhealthy: when more members than this are Unhealthy at once (a
	// number, or a percentage of replicas rounded down), the likely fault is
	// the probe target or the network, not the proxies; the pool replaces
	// none and says so in the RemediationAllowed condition.
	// +kubebuilder:default="40%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? int(self) >= 0 : string(self).matches('^[0-9]+%$')",message="spec.remediation.maxUnhealthy must be a non-negative number or a percentage such as 40%"
	// +optional
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
}

// ProxyPoolStatus is the observed state of a ProxyPool.
type ProxyPoolStatus struct {
	// Replicas is how many members exist (draining ones included).
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is how many members are Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// AvailableReplicas is how many members are Ready and not draining:
	// what the lease API can hand out.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// UpdatedReplicas is how many members are built from the current
	// template revision and younger than maxAge.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`

	// Selector is the label selector of the members, as a string (the scale
	// subresource's labelSelectorPath).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Revision is the current template revision: a hash of the template
	// and of the content of the Secrets it references. Up-to-date members
	// carry it in the crawl.proxyfleet.io/pool-revision label.
	// +optional
	Revision string `json:"revision,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Recycled counts the members spec.recycle has replaced, by reason.
	// +optional
	Recycled PoolRecycleStatus `json:"recycled,omitempty"`

	// Demand is the lease demand on the pool (autoscale_types.go).
	// +optional
	Demand *PoolDemand `json:"demand,omitempty"`

	// Usage is the members' outcomes, what they used and what it cost
	// (outcome_types.go).
	// +optional
	Usage *PoolUsage `json:"usage,omitempty"`

	// Conditions: Available (at least replicas - maxUnavailable members are
	// available), Progressing (members are being created, drained or
	// replaced), RemediationAllowed (False while more than maxUnhealthy
	// members are Unhealthy), with spec.recycle Recycling (True while
	// burned or used-up members are leaving), and with spec.autoscaling
	// Autoscaling.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// ProxyPoolList is a list of ProxyPools.
type ProxyPoolList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the ProxyPools.
	Items []ProxyPool `json:"items"`
}

// Names the pool controller writes onto its members.
const (
	// PoolLabel names the pool a member belongs to.
	PoolLabel = "crawl.proxyfleet.io/pool"
	// PoolRevisionLabel is the template revision a member was made from.
	PoolRevisionLabel = "crawl.proxyfleet.io/pool-revision"
	// PoolInstanceLabel names the pool a shared instance belongs to
	// (spec.membersPerInstance). An instance is not a member: it carries
	// no PoolLabel, so nothing leases it directly.
	PoolInstanceLabel = "crawl.proxyfleet.io/pool-instance"
	// ExitCountryLabel is a member's status.exitCountry, kept in sync by
	// its pool so that a label selector picks members by country; absent
	// while the country is unknown.
	ExitCountryLabel = "crawl.proxyfleet.io/exit-country"
	// DrainingAnnotation marks a member chosen for removal: the lease API
	// grants no new lease on it, and its live leases keep renewing. The
	// value is when draining began (RFC 3339).
	DrainingAnnotation = "crawl.proxyfleet.io/draining"
	// DrainReasonAnnotation says why the member is draining (OutOfDate,
	// TooOld, Unhealthy, ScaledDown), for kubectl describe readers.
	DrainReasonAnnotation = "crawl.proxyfleet.io/drain-reason"
)

// Condition types of a ProxyPool's status.conditions.
const (
	// PoolConditionAvailable: at least replicas - maxUnavailable members are available.
	PoolConditionAvailable = "Available"
	// PoolConditionProgressing: members are being created, drained or replaced.
	PoolConditionProgressing = "Progressing"
	// PoolConditionRemediationAllowed: False while more than maxUnhealthy
	// members are Unhealthy, so that none is replaced.
	PoolConditionRemediationAllowed = "RemediationAllowed"
)
