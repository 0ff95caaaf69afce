// Package sharedendpoint tests many Proxy objects behind one upstream address
// (tests only): the operator process on a real kube-apiserver probing 200
// External Proxies on one tinyproxy and 200 on one squid for five minutes,
// the way a proxy network's super proxy or a many-port squid is used. It
// checks that no verdict flips and, from each upstream's own log, that the
// probes reaching it never exceed the per-endpoint bound at once.
package sharedendpoint
