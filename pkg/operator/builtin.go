package operator

import (
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/provider/azure"
	"github.com/proxyfleet/proxy-operator/pkg/provider/digitalocean"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/provider/hetzner"
	"github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/provider/session"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
)

// BuiltinProviders are the providers compiled into the operator binary, one
// line each: this list is the registry. --providers chooses which of them
// run; the values it accepts, the providers' flags and the spec hash's
// provider blocks all come from here
// (docs/decisions/0440-providers-register-themselves.md). A new provider
// goes at the end.
func BuiltinProviders() provider.Registry {
	return provider.Registry{
		kubernetes.Registration(),
		local.Registration(),
		gce.Registration(),
		aws.Registration(),
		hetzner.Registration(),
		digitalocean.Registration(),
		azure.Registration(),
		upstream.Registration(),
		session.Registration(),
	}
}
