package ec2test

import "github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"

// randomFaults are EC2's under load (SetRandomFaults): throttled or
// failing before the effect (RequestLimitExceeded, InternalError), a
// launch without capacity, or a call that takes effect and then answers
// InternalError.
//
// The order is EC2's where it matters: throttling and internal errors may
// come before anything else, but a launch's capacity is judged only after
// its client token: a retry of a launch that took effect (its answer lost)
// gets that instance back, never InsufficientInstanceCapacity, as EC2's
// idempotency guarantees (runInstances reads Call.NoCapacity there).
func randomFaults(action Action) []faultkit.Fault[Error] {
	noCapacity := faultkit.Fault[Error]{NoCapacity: true}
	if action != RunInstances {
		noCapacity = faultkit.Error(ErrInternal)
	}
	return []faultkit.Fault[Error]{faultkit.Error(ErrRequestLimitExceeded), noCapacity, {Lose: true}, faultkit.Error(ErrInternal)}
}
