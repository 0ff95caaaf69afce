package operator

import (
	"fmt"
	"net"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// listenGateway builds the gateway on the lease API's server (the same
// store, auth and credentials) and listens on --gateway-addr; nothing
// without the flag. Every replica listens, as for the lease API; only the
// leader answers (the others 503 not_leader), and the gateway Service
// selects the leader by its label.
func (op *operator) listenGateway(o Options, m *metrics.Metrics) error {
	if o.GatewayAddr == "" {
		return nil
	}
	authn, authz := op.leases.Auth()
	gw, err := gateway.New(gateway.Config{
		Leases:        gateway.FromServer(op.leases),
		Authenticator: authn,
		Authorizer:    authz,
		AuthNone:      o.LeaseAuth == LeaseAuthNone,
		Wait:          o.GatewayWait,
		SessionIdle:   o.GatewaySessionIdle,
		Metrics:       m,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.GatewayAddr)
	if err != nil {
		return fmt.Errorf("--gateway-addr: %w", err)
	}
	op.gateway, op.gatewayListener = gw, ln
	return nil
}
