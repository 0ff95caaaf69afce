// Package gateway is the lease store's second door (docs/gateway.md): a forward
// proxy that crawlers reach at one address, whose Proxy-Authorization says
// who calls (the password is the caller's bearer token, checked as the lease
// API checks it) and what they want (the username's terms: ns-, pool-,
// session-). Each CONNECT tunnel or plain-HTTP request is chained through a
// proxy the gateway holds a lease on: one lease per session while the
// session is used (sticky, renewed, released when idle), or one per
// connection in rotating mode.
//
// It is no MITM by default: CONNECT tunnels are spliced bytes, and ban
// feedback for them goes through the lease API's session call. Only a
// namespace that opts into TLS inspection has its tunnels' TLS ended here
// (inspect.go, docs/inspection.md), so that responses are judged as plain
// HTTP's are. It is not a lease store either: it calls
// the lease API over HTTP for its callers (Remote, act-for), and the API
// keeps the horizon and the credentials. pkg/gatewaycmd runs it as a
// replica of the gateway tier; docs/gateway.md is the user's view.
package gateway
