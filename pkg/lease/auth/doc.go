// Package auth decides who calls the lease API and what they may do: a
// bearer token becomes a User through a TokenReview, and a call's verb and
// namespace are allowed through a SubjectAccessReview on crawl.proxyfleet.io
// proxies/leases (act-for on its own resource), both cached briefly, with a
// budget on reviews of new tokens per client address (Kubernetes). None
// allows everything, for local development (--lease-auth=none).
//
// It is not the HTTP layer (pkg/lease/server reads the Authorization
// header and the act-for headers and answers 401/403/503), and it keeps no
// lease state: a User's Identity is what the store binds leases to.
package auth
