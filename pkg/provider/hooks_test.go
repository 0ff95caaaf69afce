package provider

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// plain is a provider with no optional hook: its instances are its own.
type plain struct{ Provider }

// hooked implements every optional hook, with answers a test can tell apart.
type hooked struct{ Provider }

func (hooked) CredentialsSources(*crawlv1alpha1.Proxy) []string { return []string{"account"} }

func (hooked) RenderCredentials(p *crawlv1alpha1.Proxy, readMarked MarkedSecretReader) (*proxyaccess.Credentials, error) {
	s, err := readMarked("spec.hooked.secretRef", "account")
	if err != nil {
		return nil, err
	}
	return &proxyaccess.Credentials{Username: "user-" + p.Name, Password: string(s.Data["password"])}, nil
}

func (hooked) RefusedCredentialsHint(_ *crawlv1alpha1.Proxy, secret string) string {
	return "check Secret " + secret
}

func (hooked) RecycleAge(*crawlv1alpha1.ProxySpec) (RecycleAge, bool) {
	return RecycleAge{Age: 8 * time.Minute, Why: "before it expires", Setting: "hooked.lifetime 10m0s"}, true
}

// answers is everything a Set says about one Proxy.
type answers struct {
	Sources               []string
	Rendered              *proxyaccess.Credentials
	RenderErr             string
	ConfiguresCredentials bool
	Hint                  string
	Recycle               RecycleAge
	Recycles              bool
}

// A Set answers from the Proxy's provider's hooks, and the defaults of an
// instance the operator runs for a provider without them, a provider that
// is not enabled, and an External Proxy.
func TestSetAsksTheProxysProvider(t *testing.T) {
	set := Set{"plain": plain{}, "hooked": hooked{}}
	account := &corev1.Secret{Data: map[string][]byte{"password": []byte("pw")}}
	readMarked := func(field, name string) (*corev1.Secret, error) {
		if field != "spec.hooked.secretRef" || name != "account" {
			return nil, errors.New("read " + field + " " + name)
		}
		return account, nil
	}
	defaults := answers{ConfiguresCredentials: true}
	tests := map[string]struct {
		provider crawlv1alpha1.ProviderName
		want     answers
	}{
		"a provider without hooks": {provider: "plain", want: defaults},
		"a provider not enabled":   {provider: "absent", want: defaults},
		"an External Proxy":        {provider: "", want: defaults},
		"a provider with every hook": {provider: "hooked", want: answers{
			Sources:  []string{"account"},
			Rendered: &proxyaccess.Credentials{Username: "user-p", Password: "pw"},
			Hint:     "check Secret proxy-auth-u",
			Recycle:  RecycleAge{Age: 8 * time.Minute, Why: "before it expires", Setting: "hooked.lifetime 10m0s"},
			Recycles: true,
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{}
			p.Name, p.Spec.Provider = "p", tc.provider
			var got answers
			var err error
			got.Sources = set.CredentialsSources(p)
			got.Rendered, err = set.RenderCredentials(p, readMarked)
			if err != nil {
				got.RenderErr = err.Error()
			}
			got.ConfiguresCredentials = set.ConfiguresCredentials(p)
			got.Hint = set.RefusedCredentialsHint(p, "proxy-auth-u")
			got.Recycle, got.Recycles = set.RecycleAge(&p.Spec)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

// A nil Set (no provider enabled) answers the defaults too.
func TestNilSetAnswersDefaults(t *testing.T) {
	var set Set
	p := &crawlv1alpha1.Proxy{}
	p.Spec.Provider = "hooked"
	if !set.ConfiguresCredentials(p) {
		t.Error("ConfiguresCredentials = false, want true")
	}
	if _, ok := set.RecycleAge(&p.Spec); ok {
		t.Error("RecycleAge set for no provider")
	}
}
