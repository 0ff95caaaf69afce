package ec2test

import "math/rand/v2"

// randomFaults fail a share of all calls, the way EC2 fails under load.
type randomFaults struct {
	rate float64
	rng  *rand.Rand
}

// ErrInsufficientCapacity is a launch EC2 has no capacity for.
var ErrInsufficientCapacity = Error{Status: 500, Code: "InsufficientInstanceCapacity", Message: "We currently do not have sufficient capacity in the Availability Zone you requested."}

// SetRandomFaults makes a share rate of all calls fail, chosen by a
// generator seeded with seed: throttled or failing before they take effect
// (RequestLimitExceeded, InternalError), launches without capacity, and
// calls that take effect and then lose their answer. rate 0 stops them.
func (s *Server) SetRandomFaults(rate float64, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rate <= 0 {
		s.random = nil
		return
	}
	s.random = &randomFaults{rate: rate, rng: rand.New(rand.NewPCG(seed, 0))}
}

// randomFault draws one call's fault (under s.mu): an error to answer
// instead of acting (before), one to answer after acting (after), or, for
// a launch, no capacity.
//
// The order is EC2's where it matters: throttling and internal errors may
// come before anything else, but a launch's capacity is judged only after
// its client token: a retry of a launch that took effect (its answer lost)
// gets that instance back, never InsufficientInstanceCapacity, as EC2's
// idempotency guarantees (runInstances).
func (s *Server) randomFault(action Action) (before, after *Error, noCapacity bool) {
	f := s.random
	if f == nil || f.rng.Float64() >= f.rate {
		return nil, nil, false
	}
	switch n := f.rng.IntN(4); {
	case n == 0:
		return &ErrRequestLimitExceeded, nil, false
	case n == 1 && action == RunInstances:
		return nil, nil, true
	case n == 2:
		return nil, &ErrInternal, false
	default:
		return &ErrInternal, nil, false
	}
}
