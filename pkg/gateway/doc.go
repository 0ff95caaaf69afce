// Package gateway is the lease store's second door (docs/gateway.md): a forward
// proxy that crawlers reach at one address, whose Proxy-Authorization says
// who calls (the password is the caller's bearer token, checked as the lease
// API checks it) and what they want (the username's terms: ns-, pool-,
// session-). Each CONNECT tunnel or plain-HTTP request is chained through a
// proxy the gateway holds a lease on: one lease per session while the
// session is used (sticky, renewed, released when idle), or one per
// connection in rotating mode.
//
// It is not a MITM: CONNECT tunnels are spliced bytes, never decrypted; ban
// feedback goes through the lease API's session call instead of anything
// the gateway would have to read. It is not a lease store either: it calls
// the lease API over HTTP for its callers (Remote, act-for), and the API
// keeps the horizon and the credentials. pkg/gatewaycmd runs it as a
// replica of the gateway tier; docs/gateway.md is the user's view.
package gateway
