// Package options is local-up's command line, what `make run ARGS=...`
// passes: its own flags, the operator's with development defaults, and the
// gateway replica's listen addresses. It is a package of its own so that the
// docs test (docs/docs_test.go) can list the flags without running anything.
package options

import (
	"flag"

	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gatewaycmd"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
)

// Options is local-up's configuration.
type Options struct {
	Dir               string
	TargetAddr        string
	ExternalProxyAddr string
	Examples          string
	Operator          operator.Options
	// Gateway is one replica of the gateway tier, run beside the operator
	// as `proxy-operator gateway` would run (docs/gateway.md).
	Gateway gatewaycmd.Options
}

// LocalProvider is the local provider's settings among the operator's
// (--local-state-dir, --local-loopback-exits).
func (o *Options) LocalProvider() *local.Settings {
	return o.Operator.ProviderSettings(crawlv1alpha1.ProviderLocal).(*local.Settings)
}

// developmentDefaults replace the operator's: one replica, no cluster auth
// for the lease API, loopback only, the local provider.
var developmentDefaults = map[string]string{
	"leader-elect": "false", "lease-auth": "none", "providers": "local",
	"lease-addr": "127.0.0.1:8080", "metrics-addr": "127.0.0.1:9090", "local-state-dir": "",
}

// NewFlagSet returns local-up's flags, parsed into o, with the development
// defaults set.
func NewFlagSet(o *Options) *flag.FlagSet {
	*o = Options{Operator: operator.DefaultOptions(), Gateway: gatewaycmd.DefaultOptions()}
	fs := flag.NewFlagSet("local-up", flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.Dir, "dir", ".local", "where the embedded API server and the local instances keep their state")
	fs.StringVar(&o.TargetAddr, "target-addr", "127.0.0.1:8443", "the local HTTPS target the example proxies are probed against")
	fs.StringVar(&o.ExternalProxyAddr, "external-proxy-addr", "127.0.0.1:3128", "the existing forward proxy the External example points at")
	fs.StringVar(&o.Examples, "examples", "examples", "the directory of example manifests")
	fs.StringVar(&o.Gateway.Listen, "gateway-listen", "127.0.0.1:3129", "where the gateway tier's replica listens (empty: none)")
	fs.StringVar(&o.Gateway.MetricsAddr, "gateway-metrics-addr", "127.0.0.1:9091", "the gateway replica's /metrics, /healthz and /readyz")
	o.Operator.AddFlags(fs)
	for name, value := range developmentDefaults {
		if err := fs.Set(name, value); err != nil {
			panic(err) // a renamed operator flag: every run fails the same way
		}
	}
	return fs
}
