// Package cloudkit holds what every cloud VM provider repeats, so that a
// new cloud is the mapping between its SDK and this kit: the ownership
// labels every instance carries and the test that an instance is this
// cluster's (labels.go), the idempotency key of a create and the instance
// name derived from it (labels.go), the same labels as plain string tags
// for clouds without key=value labels (flattags.go), the user-data that
// hands the proxy its settings and generated credentials (userdata.go),
// the boot script that sets up a cloud's routed IPv6 prefix as the proxy's
// exit range and the prefixes an instance reports (exitrange.go),
// the walk over an ordered list of places on capacity errors (errors.go),
// the error classes a cloud's codes map to and the wait a 429 asks for
// (errors.go), and a gate that keeps calls within a token bucket and past
// a Retry-After, with the retry loop around one call (gate.go).
//
// It holds no SDK and makes no call. The orphan and duplicate decisions
// stay in pkg/gc (decide.go), which every provider already shares through
// ListByTag and Instance.CreatedAt; the kit's part of them is Owned, which
// scopes a provider's listing to its cluster.
package cloudkit
