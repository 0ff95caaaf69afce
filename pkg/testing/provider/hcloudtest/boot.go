package hcloudtest

import (
	"net/netip"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// BootForwardProxy is a WithBoot that does what a server's cloud-init
// would: it reads the settings file the operator's part of the user-data
// writes (the kit's format, which the aws provider shares, so ec2test
// reads it) and serves our forward proxy on the server's public IP with
// that port and those credentials, admitting targets in allow. A server is
// then Ready only if the operator's probe goes through the proxy its own
// create configured.
func BootForwardProxy(t testing.TB, allow ...netip.Prefix) func(Server) func() {
	return BootForwardProxyRecorded(t, nil, allow...)
}

// BootForwardProxyRecorded is BootForwardProxy recording the exit ranges
// each server's proxy was started with in rec: its /64 when the user-data
// sets up an exit range (the boot script finds it as the on-link route).
func BootForwardProxyRecorded(t testing.TB, rec *ec2test.Boots, allow ...netip.Prefix) func(Server) func() {
	return func(s Server) func() {
		var routed []string
		if s.IPv6Net != "" {
			routed = []string{s.IPv6Net}
		}
		return ec2test.ServeForwardProxy(t, ec2test.Boot{Name: s.Name, UserData: s.UserData, PublicIP: s.PublicIP, RoutedPrefixes: routed}, rec, allow...)
	}
}
