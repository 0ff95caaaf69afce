// Command netcheck is the real-node suite's probe of NetworkPolicies
// (pkg/testsuites/realnode): it opens a TCP connection to each address given
// and prints one line per address, "<address> connected" or
// "<address> failed: <why>". The suite runs it as a Pod, or as an ephemeral
// container inside a proxy, operator or gateway Pod, whose network it
// shares. The suite only probes ports something listens on, so a
// connection that fails was stopped by a policy (kube-router rejects).
// With --settle, a failed address is tried again until it connects or the
// time is up ("connected after <d>"): a Pod just started is admitted by
// policies that select it only once the network plugin has learnt its
// address from the API server, and a denial then holds for the whole time.
// make cluster builds it into an image and imports it.
package main

import (
	"flag"
	"fmt"
	"net"
	"time"
)

// version is set by hack/image (-X main.version).
var version = "dev"

func main() {
	timeout := flag.Duration("timeout", 3*time.Second, "how long one connection attempt may take")
	settle := flag.Duration("settle", 0, "how long a failed address is tried again")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("netcheck " + version)
		return
	}
	// In parallel: each denied address takes the whole --settle.
	results := make([]chan string, len(flag.Args()))
	start := time.Now()
	for i, addr := range flag.Args() {
		results[i] = make(chan string, 1)
		go func() { results[i] <- probe(addr, *timeout, start.Add(*settle)) }()
	}
	for i, addr := range flag.Args() {
		fmt.Println(addr, <-results[i])
	}
}

func probe(addr string, timeout time.Duration, until time.Time) string {
	start := time.Now()
	for failed := false; ; failed = true {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			conn.Close()
			if failed {
				return "connected after " + time.Since(start).Round(time.Millisecond).String()
			}
			return "connected"
		}
		if time.Now().After(until) {
			return "failed: " + err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
}
