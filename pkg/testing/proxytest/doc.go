// Package proxytest holds test helpers for anything that talks to forward
// proxies: loopback HTTP and HTTPS targets, proxies to test against
// (pkg/forwardproxy in-process, the cmd/forward-proxy binary, and tinyproxy
// from Debian as a proxy nobody here wrote), and a client that records what
// a proxy answered to CONNECT.
//
// Everything listens on and dials 127.0.0.1 only. Processes are stopped in
// t.Cleanup, and their output is logged when the test failed. A missing
// tinyproxy binary fails the test with a message naming `make deps`. Under
// -short (the unit loop) every helper that starts a process, or builds one,
// skips the test instead (integration.Needs); the in-process proxy and the
// targets run there too.
//
// Packages that start the binary need
//
//	func TestMain(m *testing.M) { os.Exit(proxytest.Main(m)) }
//
// so that it is built once per test binary and removed afterwards.
package proxytest
