package hcloudtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// BootForwardProxy is a WithBoot that does what a server's cloud-init
// would: it reads the settings file the operator's part of the user-data
// writes (the kit's format, which the aws provider shares, so
// ec2test.UserDataEnv reads it) and serves our forward proxy on the
// server's public IP with that port and those credentials, admitting
// targets in allow. A server is then Ready only if the operator's probe
// goes through the proxy its own create configured.
func BootForwardProxy(t testing.TB, allow ...netip.Prefix) func(Server) func() {
	return func(s Server) func() {
		env, err := ec2test.UserDataEnv(s.UserData)
		if err != nil {
			t.Errorf("server %s: %v", s.Name, err)
			return func() {}
		}
		srv, err := forwardproxy.New(forwardproxy.Config{
			Username: env["PROXY_AUTH_USERNAME"], Password: env["PROXY_AUTH_PASSWORD"], AllowCIDRs: allow,
		})
		if err != nil {
			t.Errorf("server %s: %v", s.Name, err)
			return func() {}
		}
		l, err := net.Listen("tcp", net.JoinHostPort(s.PublicIP, env["PROXY_PORT"]))
		if err != nil {
			t.Errorf("server %s: %v", s.Name, err)
			return func() {}
		}
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("server %s: serve: %v", s.Name, err)
			}
		}()
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}
	}
}
