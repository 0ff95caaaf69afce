// Package server is the lease API over HTTP (docs/api.md) in front of a
// pkg/lease/store Store: routes on the standard library's ServeMux, strict
// decoding of bodies and queries, authentication and authorization through
// the pkg/lease/auth seams (act-for included), JSON errors for every store
// error, leader gating (StartLeading, StopLeading), and the horizon a term
// keeps persisted ahead of every expiry it hands out (horizon.go) so that a
// successor knows how long to wait.
//
// An acquire reads in order: routing.go (the route), handlers.go (acquire:
// authenticate, decode, authorize, acquireWithinHorizon, credentials,
// answer), then the store's Acquire (pkg/lease/store's leases.go).
//
// It decides no lease: the store does. It reads no Kubernetes object: the
// feeds (pkg/lease/feed) and the authenticator (pkg/lease/auth) do.
package server
