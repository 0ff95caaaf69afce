package operator

import "runtime/debug"

// version is set at link time:
//
//	go build -ldflags "-X github.com/proxyfleet/proxy-operator/pkg/operator.version=v0.1.0" ./cmd/proxy-operator
//
// Without it, Version falls back to the module version Go stamped into the
// binary, and to "dev" for a build from a work tree.
var version string

// Version is the operator's version, as --version, the User-Agent and
// proxy_operator_build_info show it.
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
