package azuretest

import (
	"net/netip"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// BootForwardProxy is a WithBoot that does what a VM's cloud-init would:
// it reads the settings file the operator's part of the custom data
// writes (the kit's format) and serves our forward proxy on the VM's
// public IP with that port and those credentials, admitting targets in
// allow. It is hcloudtest's, which reads the same kit user-data.
func BootForwardProxy(t testing.TB, allow ...netip.Prefix) func(VM) func() {
	boot := hcloudtest.BootForwardProxy(t, allow...)
	return func(vm VM) func() {
		return boot(hcloudtest.Server{Name: vm.Name, UserData: vm.UserData, PublicIP: vm.PublicIP})
	}
}
