package operator

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/operator/testdata/madeupprovider"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// TestBuiltinRegistryMatchesTheAPI: the registry is the one list of
// providers, so it must agree with the API it serves. Its names are the
// values the CRD accepts in spec.provider, in the same order; every
// provider block of the Proxy spec (a field of type *<X>Provider) is
// declared by one registration, or a change of it would replace no
// instance; and no two registrations collide.
func TestBuiltinRegistryMatchesTheAPI(t *testing.T) {
	registry := BuiltinProviders()
	if err := registry.Check(); err != nil {
		t.Error(err)
	}
	if diff := cmp.Diff(crdProviderEnum(t), registry.Names()); diff != "" {
		t.Errorf("spec.provider's enum in the CRD (-) and the registered providers (+):\n%s", diff)
	}
	declared := map[string]bool{}
	for _, reg := range registry {
		declared[reg.Block.Field] = true
	}
	var blocks []string
	for f := range reflect.TypeFor[crawlv1alpha1.ProxySpec]().Fields() {
		if f.Type.Kind() == reflect.Pointer && strings.HasSuffix(f.Type.Elem().Name(), "Provider") {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			blocks = append(blocks, name)
			if !declared[name] {
				t.Errorf("spec.%s (%s) is declared by no registered provider", name, f.Type.Elem().Name())
			}
		}
	}
	if len(blocks) < 2 {
		t.Fatalf("found the provider blocks %v in ProxySpec: the test no longer recognises them", blocks)
	}
}

// crdProviderEnum is spec.provider's enum in the generated CRD.
func crdProviderEnum(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "crd", "crawl.proxyfleet.io_proxies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									Provider struct {
										Enum []string `json:"enum"`
									} `json:"provider"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || len(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Provider.Enum) == 0 {
		t.Fatal("no spec.provider enum in the CRD's one version")
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Provider.Enum
}

// madeUpRegistry is the built-in registry with the made-up cloud in the
// place of gce, whose block it declares (testdata/madeupprovider).
func madeUpRegistry() provider.Registry {
	registry := slices.DeleteFunc(BuiltinProviders(), func(r provider.Registration) bool { return r.Name == crawlv1alpha1.ProviderGCE })
	return append(registry, madeupprovider.Registration())
}

// TestMadeUpProviderRegistersItself: a provider package compiled into a
// registry with one more line is a provider of the operator with no other
// change to it. Its flags are on the command line (parsed by the real flag
// set), --providers accepts it and says so in its help, Validate asks it
// about its flags, and the build at start-up gets it from its flags and the
// operator's Secret reader. The spec hash's part is
// TestMadeUpProviderInTheSpecHash (pkg/controller).
func TestMadeUpProviderRegistersItself(t *testing.T) {
	registry := madeUpRegistry()
	parse := func(t *testing.T, args ...string) (Options, *flag.FlagSet) {
		t.Helper()
		o := NewOptions(registry)
		o.LeaderElectNamespace = "proxy-operator"
		var showVersion bool
		fs := NewFlagSet(&o, &showVersion)
		fs.Init("proxy-operator", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		if err := fs.Parse(args); err != nil {
			t.Fatalf("parsing %q: %v", args, err)
		}
		return o, fs
	}
	enabled := []string{"--providers=kubernetes,madeup", "--madeup-cluster-id=prod", "--madeup-token-secret=ops/madeup", "--madeup-region=mars-2"}

	t.Run("flags", func(t *testing.T) {
		o, fs := parse(t, enabled...)
		for _, name := range []string{"madeup-region", "madeup-cluster-id", "madeup-token-secret"} {
			if fs.Lookup(name) == nil {
				t.Errorf("no flag --%s", name)
			}
		}
		if fs.Lookup("gce-zone") != nil {
			t.Error("--gce-zone is a flag, but gce is not registered")
		}
		if usage := fs.Lookup("providers").Usage; !strings.Contains(usage, "madeup") || strings.Contains(usage, "gce") {
			t.Errorf("--providers' help %q: want madeup listed and gce not", usage)
		}
		got, _ := o.ProviderSettings(madeupprovider.Name).(*madeupprovider.Settings)
		want := &madeupprovider.Settings{Region: "mars-2", ClusterID: "prod", TokenSecret: "ops/madeup"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("its settings after parsing (-want +got):\n%s", diff)
		}
	})

	t.Run("validation", func(t *testing.T) {
		if names := registry.Names(); slices.Contains(names, "gce") || names[len(names)-1] != "madeup" {
			t.Fatalf("the test's registry is %v: want madeup last and no gce", names)
		}
		for name, tc := range map[string]struct {
			args    []string
			wantErr string
		}{
			"enabled with its flags": {args: enabled},
			"enabled without them": {args: []string{"--providers=madeup"},
				wantErr: "--madeup-cluster-id: must be set when --providers includes madeup\n--madeup-token-secret: must be set when --providers includes madeup"},
			"a flag checked while not enabled": {args: []string{"--madeup-token-secret=madeup"},
				wantErr: `--madeup-token-secret: must be namespace/name, got "madeup"`},
			"gce is not known": {args: []string{"--providers=gce"},
				wantErr: `--providers: unknown provider "gce" (known: ` + strings.Join(registry.Names(), ", ") + ")"},
		} {
			t.Run(name, func(t *testing.T) {
				o, _ := parse(t, tc.args...)
				err := o.Validate()
				if got := errString(err); got != tc.wantErr {
					t.Errorf("Validate() = %q, want %q", got, tc.wantErr)
				}
			})
		}
	})

	t.Run("build", func(t *testing.T) {
		o, _ := parse(t, enabled...)
		kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "madeup"},
			Data: map[string][]byte{madeupprovider.TokenSecretKey: []byte("s3cret\n")}})
		built, err := buildProviders(t.Context(), o, providerEnv(kube, o))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := built[madeupprovider.Name].(*madeupprovider.Provider)
		if !ok {
			t.Fatalf("built %T for madeup, want *madeupprovider.Provider", built[madeupprovider.Name])
		}
		if got.Region != "mars-2" || got.ClusterID != "prod" || got.TokenLength != len("s3cret") {
			t.Errorf("built madeup with region %q, cluster ID %q and a token of %d bytes; want mars-2, prod, 6", got.Region, got.ClusterID, got.TokenLength)
		}
		if _, ok := built[crawlv1alpha1.ProviderKubernetes]; !ok || len(built) != 2 {
			t.Errorf("built %d providers, want kubernetes and madeup", len(built))
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
