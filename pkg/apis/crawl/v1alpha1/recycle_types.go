package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolRecycle says when a member is replaced (a new instance, so a new IP)
// because of what its leases showed: the sites ban it (burned), or it has
// served its share (used up). Recycling goes through spec.strategy's budget
// and drains like any replacement.
// +kubebuilder:validation:XValidation:rule="has(self.maxBannedDomains) || has(self.maxLeases)",message="spec.recycle must set maxBannedDomains or maxLeases"
type PoolRecycle struct {
	// MaxBannedDomains: a member released with outcome banned for this many
	// distinct domains within window is burned and recycled. The lease
	// store counts per instance: a member whose instance is replaced starts
	// again from zero. 1 to 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxBannedDomains *int32 `json:"maxBannedDomains,omitempty"`

	// Window is how far back the bans of maxBannedDomains count: a domain
	// counts if its latest ban on the member is at most this old. 1s to 168h.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="spec.recycle.window must be between 1s and 168h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`

	// MaxLeases: a member granted this many leases is used up and recycled
	// (a usage count, like Crawlee's maxUsageCount; renewals do not count).
	// Not to be confused with spec.template.spec.maxLeases, how many leases
	// may hold a member at once. At least 1.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxLeases *int64 `json:"maxLeases,omitempty"`
}

// PoolRecycleStatus counts the members spec.recycle has replaced since the
// pool was created.
type PoolRecycleStatus struct {
	// Burned: members recycled because maxBannedDomains domains banned them.
	// +optional
	Burned int64 `json:"burned"`

	// UsedUp: members recycled because they served maxLeases leases.
	// +optional
	UsedUp int64 `json:"usedUp"`
}

const (
	// PoolConditionRecycling: True while members are leaving because
	// spec.recycle found them burned or used up; its message names them.
	PoolConditionRecycling = "Recycling"

	// ProxyConditionRecycled is set on a ProxyPool member that spec.recycle
	// chose for replacement, saying why (reason Burned or UsedUp).
	ProxyConditionRecycled = "Recycled"
)
