package provider

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// A provider package describes itself in one value it exports, its
// Registration: its name, its block of the Proxy spec and what of that
// block makes an instance, its flags, and how it is built. The composition
// root lists the registrations of the providers compiled in, one line
// each (pkg/operator/builtin.go), and that list is the Registry: no
// init(), no global. The operator derives from it what --providers
// accepts, the flags and their checks, the providers built at start-up,
// and the provider blocks of the spec hash
// (docs/decisions/0440-providers-register-themselves.md).

// Registration is one provider as a binary compiles it in.
type Registration struct {
	// Name is the provider's spec.provider value.
	Name crawlv1alpha1.ProviderName
	// Block is the provider's block of the Proxy spec.
	Block SpecBlock
	// NewSettings returns the provider's operator settings at their
	// defaults; each command line gets its own.
	NewSettings func() Settings
}

// SpecBlock is a provider's block of the Proxy spec, spec.<Field>. Its Go
// type is declared in pkg/apis, because the CRD and the generated code are
// made from those types; the registration names the field and reads it.
type SpecBlock struct {
	// Field is the block's JSON name in the spec ("gce" for spec.gce);
	// the spec hash encodes the block under it. "" when the provider has
	// no block.
	Field string
	// Hashed returns what of spec's block makes an instance, nil (or a nil
	// pointer) when the block is absent. The spec hash encodes it, so a
	// change of it replaces the instance and a change of the rest of the
	// block does not. A cloud returns its whole block. Hashed itself is nil
	// when nothing of the block makes an instance: a proxy network's
	// session is the same session whatever its username template says.
	Hashed func(spec *crawlv1alpha1.ProxySpec) any
}

// HashedValue is what of spec's block the spec hash encodes, and false
// when there is nothing (no block, or nothing of it makes an instance).
func (b SpecBlock) HashedValue(spec *crawlv1alpha1.ProxySpec) (any, bool) {
	if b.Hashed == nil || b.Field == "" {
		return nil, false
	}
	v := b.Hashed(spec)
	if v == nil {
		return nil, false
	}
	// A block is a pointer field: an absent one comes back as a typed nil.
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		if rv.IsNil() {
			return nil, false
		}
	}
	return v, true
}

// Settings are a provider's operator flags: bound to a flag set, checked,
// and used to build the provider.
type Settings interface {
	// AddFlags binds the settings to fs, with their current values as the
	// defaults. Every flag's name starts with the provider's name and a
	// dash (--gce-zone), so that providers never collide.
	AddFlags(fs *flag.FlagSet)
	// Validate checks the settings; enabled says whether --providers
	// includes the provider, since most settings are required only then.
	// Each error names its flag (FlagError).
	Validate(enabled bool) []error
	// New builds the provider at start-up, on every replica (leader or
	// not), so it must not start background work or touch instances: only
	// the leader's controller calls the provider.
	New(ctx context.Context, env Env) (Provider, error)
}

// Env is what a provider may take from the operator when it is built.
type Env struct {
	// KubeClient talks to the cluster the operator runs against (the Pod
	// provider makes its Pods there).
	KubeClient kubernetes.Interface
	// OperatorNamespace is the namespace of the operator's own Pod
	// (--pod-namespace); "" outside a Pod.
	OperatorNamespace string
	// ReadSecret reads the Secret the provider's flag (its name, without
	// dashes) names as namespace/name, once, waiting for the API server to
	// answer. Its errors name the flag and the Secret, never a value.
	ReadSecret func(ctx context.Context, flag, ref string) (*corev1.Secret, error)
}

// ReadToken reads the Secret a flag names (ReadSecret) and returns its key,
// trimmed of white space: an API token. A Secret without it fails naming
// the flag, the Secret and the key, never a value.
func (e Env) ReadToken(ctx context.Context, flag, ref, key string) (string, error) {
	secret, err := e.ReadSecret(ctx, flag, ref)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(secret.Data[key]))
	if token == "" {
		return "", fmt.Errorf("--%s %s: no key %q", flag, ref, key)
	}
	return token, nil
}

// Secrets reads a Secret of a Proxy's namespace, live: what providers that
// configure an instance with its Proxy's credentials read them with.
func (e Env) Secrets(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return e.KubeClient.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Registry is the providers compiled into a binary, in the order of the
// composition root's list.
type Registry []Registration

// Names are the registered providers' names in order: the values
// --providers accepts.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for _, reg := range r {
		names = append(names, string(reg.Name))
	}
	return names
}

// Lookup returns the registration of the provider called name.
func (r Registry) Lookup(name crawlv1alpha1.ProviderName) (Registration, bool) {
	for _, reg := range r {
		if reg.Name == name {
			return reg, true
		}
	}
	return Registration{}, false
}

// Check reports what would make two registrations collide or one unusable:
// a name that is empty or taken, a block the spec has no field for or
// another provider declared, no settings, or a flag whose name does not
// start with its provider's.
func (r Registry) Check() error {
	var errs []error
	names, fields := map[crawlv1alpha1.ProviderName]bool{}, map[string]crawlv1alpha1.ProviderName{}
	specFields := jsonFields(reflect.TypeFor[crawlv1alpha1.ProxySpec]())
	for _, reg := range r {
		switch {
		case reg.Name == "":
			errs = append(errs, errors.New("a provider registers no name"))
		case names[reg.Name]:
			errs = append(errs, fmt.Errorf("provider %q is registered twice", reg.Name))
		}
		names[reg.Name] = true
		if f := reg.Block.Field; f != "" {
			if !specFields[f] {
				errs = append(errs, fmt.Errorf("provider %q declares spec.%s, which the Proxy spec has no field for", reg.Name, f))
			}
			if other, taken := fields[f]; taken {
				errs = append(errs, fmt.Errorf("providers %q and %q both declare spec.%s", other, reg.Name, f))
			}
			fields[f] = reg.Name
		}
		if reg.NewSettings == nil {
			errs = append(errs, fmt.Errorf("provider %q registers no settings", reg.Name))
			continue
		}
		fs := flag.NewFlagSet(string(reg.Name), flag.ContinueOnError)
		reg.NewSettings().AddFlags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Name, string(reg.Name)+"-") {
				errs = append(errs, fmt.Errorf("provider %q: flag --%s does not start with %q", reg.Name, f.Name, string(reg.Name)+"-"))
			}
		})
	}
	return errors.Join(errs...)
}

// jsonFields are the JSON names of a struct's fields.
func jsonFields(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}

// FlagError is a refused flag value, worded as the operator reports every
// refused flag: "--<flag>: <why>".
func FlagError(flag, format string, args ...any) error {
	return fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...))
}

// CheckSecretFlag refuses a flag naming a Secret that is not
// namespace/name; empty (no Secret) passes.
func CheckSecretFlag(flag, ref string) error {
	if ns, name, ok := strings.Cut(ref, "/"); ref != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
		return FlagError(flag, "must be namespace/name, got %q", ref)
	}
	return nil
}

// NoFlags is NewSettings for a provider that takes no flags: build makes it.
func NoFlags(build func() Provider) func() Settings {
	return func() Settings { return noFlags(build) }
}

type noFlags func() Provider

func (noFlags) AddFlags(*flag.FlagSet) {}

func (noFlags) Validate(bool) []error { return nil }

func (b noFlags) New(context.Context, Env) (Provider, error) { return b(), nil }
