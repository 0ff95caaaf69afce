// Package v1alpha1 is the v1alpha1 version of the crawl.proxyfleet.io API:
// the Proxy kind, a forward HTTP(S) proxy that the operator provisions (Managed)
// or points at (External), probes, and leases to crawler workers.
//
// The doc comments on the types become the CRD's field descriptions, so they
// are written for `kubectl explain` readers, not for Go programmers.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=crawl.proxyfleet.io
package v1alpha1
