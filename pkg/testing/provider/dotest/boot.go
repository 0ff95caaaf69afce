package dotest

import (
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// BootForwardProxy is a WithBoot that does what a droplet's cloud-init
// would: it reads the settings file the operator's part of the user-data
// writes (the kit's format) and serves our forward proxy on the droplet's
// public IP with that port and those credentials, admitting targets in
// allow. It is hcloudtest's, which reads the same kit user-data.
func BootForwardProxy(t testing.TB, allow ...netip.Prefix) func(Droplet) func() {
	boot := hcloudtest.BootForwardProxy(t, allow...)
	return func(d Droplet) func() {
		return boot(hcloudtest.Server{Name: d.Name, UserData: d.UserData, PublicIP: d.PublicIP})
	}
}

// readAll reads a request's body, at most twice DigitalOcean's user-data
// limit beside the rest of a create.
func readAll(r *http.Request) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r.Body, 4*maxUserData))
}
