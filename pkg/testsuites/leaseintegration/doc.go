// Package leaseintegration holds the lease API's tests against a real
// kube-apiserver (pkg/testing/testenv): TokenReview and SubjectAccessReview with
// RBAC, revocation through the Proxy informer, and the ConfigMap that keeps the horizon.
// It has no code of its own.
package leaseintegration
