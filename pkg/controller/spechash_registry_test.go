package controller_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/operator/testdata/madeupprovider"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// TestSpecHashCoversEachProvidersBlock: with the operator's registry, a
// change of a provider's block is a new instance, except for upstream,
// whose block makes no instance (a session is a new Proxy). A provider
// added later is covered by TestSpecHashHasEveryRegisteredBlock.
func TestSpecHashCoversEachProvidersBlock(t *testing.T) {
	type spec = crawlv1alpha1.ProxySpec
	managed := func(p crawlv1alpha1.ProviderName, block func(*spec)) spec {
		s := spec{Mode: crawlv1alpha1.ModeManaged, Provider: p}
		block(&s)
		return s
	}
	tests := map[crawlv1alpha1.ProviderName]struct{ before, after spec }{
		crawlv1alpha1.ProviderKubernetes: {
			managed("kubernetes", func(s *spec) { s.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 3128} }),
			managed("kubernetes", func(s *spec) { s.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 3129} })},
		crawlv1alpha1.ProviderLocal: {
			managed("local", func(s *spec) { s.Local = &crawlv1alpha1.LocalProvider{} }),
			managed("local", func(s *spec) {
				s.Local = &crawlv1alpha1.LocalProvider{ExitRanges: []crawlv1alpha1.CIDR{"2001:db8::/64"}}
			})},
		crawlv1alpha1.ProviderGCE: {
			managed("gce", func(s *spec) { s.GCE = &crawlv1alpha1.GCEProvider{MachineType: "e2-micro"} }),
			managed("gce", func(s *spec) { s.GCE = &crawlv1alpha1.GCEProvider{MachineType: "e2-medium"} })},
		crawlv1alpha1.ProviderAWS: {
			managed("aws", func(s *spec) { s.AWS = &crawlv1alpha1.AWSProvider{InstanceTypes: []string{"t3.nano"}} }),
			managed("aws", func(s *spec) { s.AWS = &crawlv1alpha1.AWSProvider{InstanceTypes: []string{"t3a.micro"}} })},
		crawlv1alpha1.ProviderHetzner: {
			managed("hetzner", func(s *spec) { s.Hetzner = &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}} }),
			managed("hetzner", func(s *spec) { s.Hetzner = &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cpx11"}} })},
		crawlv1alpha1.ProviderDigitalOcean: {
			managed("digitalocean", func(s *spec) {
				s.DigitalOcean = &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{"s-1vcpu-512mb-10gb"}}
			}),
			managed("digitalocean", func(s *spec) { s.DigitalOcean = &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{"s-1vcpu-1gb"}} })},
		crawlv1alpha1.ProviderAzure: {
			managed("azure", func(s *spec) { s.Azure = &crawlv1alpha1.AzureProvider{VMSizes: []string{"Standard_B1s"}} }),
			managed("azure", func(s *spec) { s.Azure = &crawlv1alpha1.AzureProvider{VMSizes: []string{"Standard_B1ms"}} })},
		crawlv1alpha1.ProviderSession: {
			managed("session", func(s *spec) { s.Session = &crawlv1alpha1.SessionProvider{Instance: "ranged-0"} }),
			managed("session", func(s *spec) { s.Session = &crawlv1alpha1.SessionProvider{Instance: "ranged-1"} })},
		crawlv1alpha1.ProviderUpstream: {
			managed("upstream", func(s *spec) { s.Upstream = &crawlv1alpha1.UpstreamProvider{UsernameTemplate: "a-{session}"} }),
			managed("upstream", func(s *spec) { s.Upstream = &crawlv1alpha1.UpstreamProvider{UsernameTemplate: "b-{session}"} })},
	}
	registry := operator.BuiltinProviders()
	replaces, want := map[crawlv1alpha1.ProviderName]bool{}, map[crawlv1alpha1.ProviderName]bool{}
	for name, tc := range tests {
		replaces[name] = controller.SpecHash(registry, tc.before, nil, "") != controller.SpecHash(registry, tc.after, nil, "")
		want[name] = name != crawlv1alpha1.ProviderUpstream
	}
	if diff := cmp.Diff(want, replaces); diff != "" {
		t.Errorf("a change of the provider's block replaces the instance (-want +got):\n%s", diff)
	}
}

// TestSpecHashHasEveryRegisteredBlock: for every provider of the
// operator's registry, whichever comes, a spec with its block (empty, as
// the API server may store it) hashes unlike one without, unless the
// provider hashes nothing of its block.
func TestSpecHashHasEveryRegisteredBlock(t *testing.T) {
	registry := operator.BuiltinProviders()
	blocks := map[string]reflect.StructField{}
	for f := range reflect.TypeFor[crawlv1alpha1.ProxySpec]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		blocks[name] = f
	}
	for _, reg := range registry {
		field, ok := blocks[reg.Block.Field]
		if !ok || field.Type.Kind() != reflect.Pointer {
			continue // no block, or not a pointer: registry.Check and the operator's tests refuse those
		}
		without := crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: reg.Name}
		with := without
		reflect.ValueOf(&with).Elem().FieldByIndex(field.Index).Set(reflect.New(field.Type.Elem()))
		differ := controller.SpecHash(registry, with, nil, "") != controller.SpecHash(registry, without, nil, "")
		if want := reg.Block.Hashed != nil; differ != want {
			t.Errorf("provider %s: a spec with spec.%s hashes unlike one without: %v, want %v", reg.Name, reg.Block.Field, differ, want)
		}
	}
}

// TestMadeUpProviderInTheSpecHash: a provider registered with one more
// line of a registry is in the spec hash as it declared itself: a change
// of what it hashes replaces the instance, a change of the rest of its
// block does not, and the other providers' specs hash as before.
func TestMadeUpProviderInTheSpecHash(t *testing.T) {
	var registry provider.Registry
	for _, reg := range operator.BuiltinProviders() {
		if reg.Name != crawlv1alpha1.ProviderGCE { // the made-up cloud declares spec.gce
			registry = append(registry, reg)
		}
	}
	registry = append(registry, madeupprovider.Registration())
	if err := registry.Check(); err != nil {
		t.Fatal(err)
	}
	spec := func(block crawlv1alpha1.GCEProvider) crawlv1alpha1.ProxySpec {
		return crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: madeupprovider.Name, GCE: &block}
	}
	hash := func(s crawlv1alpha1.ProxySpec) string { return controller.SpecHash(registry, s, nil, "") }
	base := crawlv1alpha1.GCEProvider{Zone: "mars-1a", MachineType: "small", NetworkTags: []string{"proxy"}}
	got := map[string]bool{
		"machine type": hash(spec(base)) != hash(spec(crawlv1alpha1.GCEProvider{Zone: "mars-1a", MachineType: "large", NetworkTags: []string{"proxy"}})),
		"zone":         hash(spec(base)) != hash(spec(crawlv1alpha1.GCEProvider{Zone: "mars-1b", MachineType: "small", NetworkTags: []string{"proxy"}})),
		"network tags": hash(spec(base)) != hash(spec(crawlv1alpha1.GCEProvider{Zone: "mars-1a", MachineType: "small", NetworkTags: []string{"proxy", "eu"}})),
		"no block":     hash(spec(base)) != hash(crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: madeupprovider.Name}),
		"another provider's spec": hash(crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderKubernetes}) !=
			controller.SpecHash(operator.BuiltinProviders(), crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderKubernetes}, nil, ""),
	}
	want := map[string]bool{"machine type": true, "zone": true, "network tags": false, "no block": true, "another provider's spec": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("does the change replace the instance (-want +got):\n%s", diff)
	}
}
