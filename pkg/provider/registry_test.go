package provider

import (
	"context"
	"flag"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// flagSettings are settings with one string flag of the given name.
type flagSettings struct{ name, value string }

func (s *flagSettings) AddFlags(fs *flag.FlagSet) { fs.StringVar(&s.value, s.name, s.value, "a flag") }

func (s *flagSettings) Validate(bool) []error { return nil }

func (s *flagSettings) New(context.Context, Env) (Provider, error) { return nil, nil }

func registration(name crawlv1alpha1.ProviderName, field, flagName string) Registration {
	return Registration{Name: name, Block: SpecBlock{Field: field},
		NewSettings: func() Settings { return &flagSettings{name: flagName} }}
}

func TestRegistryCheck(t *testing.T) {
	tests := map[string]struct {
		registry Registry
		wantErr  string
	}{
		"distinct": {registry: Registry{registration("gce", "gce", "gce-zone"), registration("upstream", "upstream", "upstream-x")}},
		"no block": {registry: Registry{registration("gce", "", "gce-zone")}},
		"a name twice": {registry: Registry{registration("gce", "gce", "gce-zone"), registration("gce", "aws", "gce-region")},
			wantErr: `provider "gce" is registered twice`},
		"a block twice": {registry: Registry{registration("gce", "gce", "gce-zone"), registration("madeup", "gce", "madeup-zone")},
			wantErr: `providers "gce" and "madeup" both declare spec.gce`},
		"a block the spec has no field for": {registry: Registry{registration("nowhere", "nowhere", "nowhere-region")},
			wantErr: `provider "nowhere" declares spec.nowhere, which the Proxy spec has no field for`},
		"a flag of another name": {registry: Registry{registration("gce", "gce", "zone")},
			wantErr: `provider "gce": flag --zone does not start with "gce-"`},
		"no name":     {registry: Registry{registration("", "", "x")}, wantErr: "a provider registers no name\n" + `provider "": flag --x does not start with "-"`},
		"no settings": {registry: Registry{{Name: "gce"}}, wantErr: `provider "gce" registers no settings`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ""
			if err := tc.registry.Check(); err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("Check() = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestSpecBlockHashedValue(t *testing.T) {
	gce := SpecBlock{Field: "gce", Hashed: func(s *crawlv1alpha1.ProxySpec) any { return s.GCE }}
	zoneOnly := SpecBlock{Field: "gce", Hashed: func(s *crawlv1alpha1.ProxySpec) any {
		if s.GCE == nil {
			return nil
		}
		return s.GCE.Zone
	}}
	withGCE := &crawlv1alpha1.ProxySpec{GCE: &crawlv1alpha1.GCEProvider{Zone: "europe-west1-b"}}
	type result struct {
		Value any
		OK    bool
	}
	tests := map[string]struct {
		block SpecBlock
		spec  *crawlv1alpha1.ProxySpec
		want  result
	}{
		"the block":                         {block: gce, spec: withGCE, want: result{withGCE.GCE, true}},
		"an absent block (a typed nil)":     {block: gce, spec: &crawlv1alpha1.ProxySpec{}, want: result{nil, false}},
		"part of the block":                 {block: zoneOnly, spec: withGCE, want: result{"europe-west1-b", true}},
		"part of an absent block":           {block: zoneOnly, spec: &crawlv1alpha1.ProxySpec{}, want: result{nil, false}},
		"nothing of the block is hashed":    {block: SpecBlock{Field: "upstream"}, spec: &crawlv1alpha1.ProxySpec{Upstream: &crawlv1alpha1.UpstreamProvider{}}, want: result{nil, false}},
		"no block":                          {block: SpecBlock{}, spec: withGCE, want: result{nil, false}},
		"an empty block is a present block": {block: gce, spec: &crawlv1alpha1.ProxySpec{GCE: &crawlv1alpha1.GCEProvider{}}, want: result{&crawlv1alpha1.GCEProvider{}, true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, ok := tc.block.HashedValue(tc.spec)
			if diff := cmp.Diff(tc.want, result{v, ok}); diff != "" {
				t.Errorf("HashedValue (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckSecretFlag(t *testing.T) {
	got := map[string]string{}
	for _, ref := range []string{"", "ops/token", "token", "/token", "ops/", "ops/a/b"} {
		got[ref] = ""
		if err := CheckSecretFlag("x-token-secret", ref); err != nil {
			got[ref] = err.Error()
		}
	}
	want := map[string]string{"": "", "ops/token": "",
		"token":   `--x-token-secret: must be namespace/name, got "token"`,
		"/token":  `--x-token-secret: must be namespace/name, got "/token"`,
		"ops/":    `--x-token-secret: must be namespace/name, got "ops/"`,
		"ops/a/b": `--x-token-secret: must be namespace/name, got "ops/a/b"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CheckSecretFlag (-want +got):\n%s", diff)
	}
}
