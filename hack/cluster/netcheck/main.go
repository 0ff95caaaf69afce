// Command netcheck is the real-node suite's probe of NetworkPolicies
// (pkg/testsuites/realnode): it opens a TCP connection to each address given
// and prints one line per address, "<address> connected" or
// "<address> failed: <why>". The suite runs it as a Pod, or as an ephemeral
// container inside a proxy, operator or gateway Pod, whose network it
// shares. The suite only probes ports something listens on, so a
// connection that fails was stopped by a policy (kube-router rejects).
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
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("netcheck " + version)
		return
	}
	for _, addr := range flag.Args() {
		fmt.Println(addr, probe(addr, *timeout))
	}
}

func probe(addr string, timeout time.Duration) string {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "failed: " + err.Error()
	}
	conn.Close()
	return "connected"
}
