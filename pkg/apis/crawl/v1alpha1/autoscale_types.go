package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolAutoscaling sizes a pool from its lease demand, measured by the
// operator's own lease store: the slots held on its members, the acquires
// waiting (long-polls, gateway connections under --gateway-wait) whose
// namespace and selector match its members, and the recent acquires refused
// because nothing matching was free. With it set the operator owns
// spec.replicas and writes it through the scale subresource, as an HPA
// would; do not point an HPA or KEDA at the same pool.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="spec.autoscaling.minReplicas must not exceed spec.autoscaling.maxReplicas",fieldPath=".minReplicas"
type PoolAutoscaling struct {
	// MinReplicas is the fewest members the pool keeps, with no demand at
	// all. 0 scales to zero: the first acquire that waits (or a gateway
	// connection under --gateway-wait) scales it up again and is answered
	// as soon as a member is Ready.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the most members demand may ask for.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxReplicas int32 `json:"maxReplicas"`

	// TargetUtilization is the percentage of the pool's lease slots
	// (members × spec.template.spec.maxLeases) that demand should fill: the
	// pool is sized to ceil(demand / (maxLeases × target / 100)) members,
	// demand being slots held + acquires waiting + recent refusals.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetUtilization *int32 `json:"targetUtilization,omitempty"`

	// ScaleDownDelay is how long demand must stay low before the pool
	// shrinks: it shrinks to the highest size demand asked for within this
	// window (an HPA's scale-down stabilization). Scale-up is not delayed.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="spec.autoscaling.scaleDownDelay must be at most 24h"
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`

	// ScaleUp bounds how fast the pool grows.
	// +kubebuilder:default={}
	// +optional
	ScaleUp PoolScaleUp `json:"scaleUp,omitempty"`
}

// PoolScaleUp bounds growth per period, as an HPA's default scale-up
// policy does: within any period the pool grows by at most the larger of
// maxStep members and percent of its size at the period's start.
type PoolScaleUp struct {
	// MaxStep is how many members may be added per period (at least).
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxStep *int32 `json:"maxStep,omitempty"`

	// Percent of the pool's size that may be added per period, when that
	// is more than maxStep.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Percent *int32 `json:"percent,omitempty"`

	// Period is the window the bounds apply to.
	// +kubebuilder:default="15s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="spec.autoscaling.scaleUp.period must be between 1s and 1h"
	// +optional
	Period *metav1.Duration `json:"period,omitempty"`
}

// PoolDemand is the lease demand on a pool as the operator last measured
// it (shown for every pool while the lease store leads).
type PoolDemand struct {
	// Held is how many lease slots of the pool's members are held.
	// +optional
	Held int32 `json:"held"`
	// Capacity is how many lease slots the pool's available members offer.
	// +optional
	Capacity int32 `json:"capacity"`
	// Waiting is how many acquires wait for a slot that a member of this
	// pool would fill (long-polls and gateway connections).
	// +optional
	Waiting int32 `json:"waiting"`
	// Refused is how many distinct holders were refused (nothing free)
	// within the last minute by an acquire a member of this pool would
	// have served.
	// +optional
	Refused int32 `json:"refused"`
	// DesiredReplicas is what the autoscaler last asked for (set only with
	// spec.autoscaling).
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`
	// LastScaleTime is when the autoscaler last changed spec.replicas.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
}

// PoolConditionAutoscaling says what the autoscaler decided and why
// (reasons ScaledUp, ScaledDown, ScaleUpLimited, ScaleDownDelayed, AtMaximum,
// Stable; False with DemandUnknown or FailedScale). Set only with
// spec.autoscaling.
const PoolConditionAutoscaling = "Autoscaling"
