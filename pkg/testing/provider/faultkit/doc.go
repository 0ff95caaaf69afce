// Package faultkit is the fault layer every cloud fake under
// pkg/testing/provider shares, so that each fake holds only what is its
// cloud's own: its state, its validation, its wire format and its error
// codes.
//
// A fake embeds a *Kit and routes each API call through Kit.Serve, which
// counts the call (Calls), checks its credential against the grants the
// fake made (scope checks: Grant, UsedPermissions) and answers, in the
// cloud's own words (Cloud), the faults a test asked for:
//
//   - errors before any effect: FailNext, FailEvery;
//   - rate limits: RateLimitNext answers the cloud's 429 with a
//     Retry-After and counts the calls that did not wait it out
//     (EarlyCalls);
//   - capacity: SetNoCapacity, which the fake's create reads (NoCapacity);
//   - lost answers: LoseNextAnswers, the call takes effect and its answer
//     never arrives;
//   - held answers: HoldAnswers, the call takes effect and its answer waits
//     for the test;
//   - all of these at random, drawn from a seed: SetRandomFaults.
//
// Lag is a resource's eventual consistency: a new one is missing from the
// first reads. BootForwardProxy starts our forward proxy as an instance's
// cloud-init would, from the user-data the operator rendered (boot.go,
// userdata.go); Kit.Boot runs it for each instance a fake starts and
// Kit.Halt stops it when the instance goes. The kit serves the fake's API
// on loopback (Kit.URL).
//
// It is no cloud: a fake that needs none of a part (gcetest checks no
// credentials) leaves it unused. It is test code only.
package faultkit
