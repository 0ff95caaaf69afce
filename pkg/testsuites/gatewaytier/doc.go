// Package gatewaytier tests the gateway as its own tier (tests only): two
// operator processes with leader election and two `proxy-operator gateway`
// processes on a real kube-apiserver, authenticating with real
// ServiceAccount tokens and RBAC (the gateway on artifacts/rbac's gateway
// role alone), forwarding real CONNECT tunnels through forward proxies. It
// kills the leader and stops a gateway while tunnels stream.
package gatewaytier
