package local

import (
	"context"
	"flag"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Registration is the local provider as the operator's registry lists it:
// spec.local, hashed whole, and the --local-* flags.
func Registration() provider.Registration {
	return provider.Registration{
		Name: crawlv1alpha1.ProviderLocal,
		Block: provider.SpecBlock{Field: "local", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
			return s.Local
		}},
		NewSettings: func() provider.Settings { return &Settings{} },
	}
}

// Settings are the local provider's operator flags.
type Settings struct {
	// StateDir is where the provider keeps its processes' state; required
	// with the local provider.
	StateDir string
	// LoopbackExits gives each instance its own loopback exit address
	// (Options.LoopbackExits).
	LoopbackExits bool
}

const stateDirFlag = "local-state-dir"

// AddFlags is provider.Settings.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.StateDir, stateDirFlag, s.StateDir, "Directory where the local provider keeps its processes' state. Required when --providers includes local.")
	fs.BoolVar(&s.LoopbackExits, "local-loopback-exits", s.LoopbackExits, "Give each local instance an exit address of its own in 127.1.0.0/16, so that sites on this machine see one IP per instance (and ban them one by one).")
}

// Validate is provider.Settings.Validate.
func (s *Settings) Validate(enabled bool) []error {
	if enabled && s.StateDir == "" {
		return []error{provider.FlagError(stateDirFlag, "must be set when --providers includes %s", crawlv1alpha1.ProviderLocal)}
	}
	return nil
}

// New runs forward-proxy processes on loopback, tracked in StateDir.
func (s *Settings) New(_ context.Context, env provider.Env) (provider.Provider, error) {
	p, err := New(Options{
		StateDir: s.StateDir, LoopbackExits: s.LoopbackExits,
		// Read only when an instance with spec.auth is created.
		Secrets: env.Secrets,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
