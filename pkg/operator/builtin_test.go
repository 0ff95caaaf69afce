package operator

import (
	"context"
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// buildWithFlags builds the provider called name as the operator would
// with the command line args: from the settings the flag set parsed, with
// the operator's environment (its Secret reader).
func buildWithFlags(ctx context.Context, t *testing.T, kube kubernetes.Interface, name crawlv1alpha1.ProviderName, args ...string) (provider.Provider, error) {
	t.Helper()
	opts := DefaultOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return opts.ProviderSettings(name).New(ctx, providerEnv(kube, opts))
}

// The hetzner provider starts from the token in the Secret its flag names;
// a Secret without one fails naming the flag and the key, not the value.
func TestNewHetznerProviderReadsTheTokenSecret(t *testing.T) {
	tests := map[string]struct {
		data    map[string][]byte
		wantErr string
	}{
		"token":    {data: map[string][]byte{"token": []byte("s3cret\n")}},
		"no token": {data: map[string][]byte{"api-token": []byte("s3cret")}, wantErr: `--hetzner-token-secret ops/hcloud: no key "token"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "hcloud"}, Data: tc.data})
			prov, err := buildWithFlags(t.Context(), t, kube, crawlv1alpha1.ProviderHetzner, "--hetzner-token-secret=ops/hcloud", "--hetzner-cluster-id=prod")
			switch {
			case tc.wantErr == "" && (err != nil || prov == nil):
				t.Fatalf("building the provider: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
}

// The digitalocean provider starts from the token in the Secret its flag
// names; a Secret without one fails naming the flag and the key.
func TestNewDigitalOceanProviderReadsTheTokenSecret(t *testing.T) {
	tests := map[string]struct {
		data    map[string][]byte
		wantErr string
	}{
		"token":    {data: map[string][]byte{"token": []byte("s3cret\n")}},
		"no token": {data: map[string][]byte{"api-token": []byte("s3cret")}, wantErr: `--digitalocean-token-secret ops/do: no key "token"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "do"}, Data: tc.data})
			prov, err := buildWithFlags(t.Context(), t, kube, crawlv1alpha1.ProviderDigitalOcean, "--digitalocean-token-secret=ops/do", "--digitalocean-cluster-id=prod")
			switch {
			case tc.wantErr == "" && (err != nil || prov == nil):
				t.Fatalf("building the provider: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
}

// The azure provider starts from the service principal in the Secret its
// flag names; a Secret without a key fails naming the flag and the key,
// never the secret.
func TestNewAzureProviderReadsTheCredentialsSecret(t *testing.T) {
	full := map[string][]byte{"tenantID": []byte("t"), "clientID": []byte("c"), "clientSecret": []byte("s3cret\n")}
	tests := map[string]struct {
		data    map[string][]byte
		wantErr string
	}{
		"service principal": {data: full},
		"no client secret":  {data: map[string][]byte{"tenantID": []byte("t"), "clientID": []byte("c")}, wantErr: `--azure-credentials-secret ops/az: no key "clientSecret"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "az"}, Data: tc.data})
			prov, err := buildWithFlags(t.Context(), t, kube, crawlv1alpha1.ProviderAzure,
				"--azure-credentials-secret=ops/az", "--azure-cluster-id=prod", "--azure-subscription-id=sub", "--azure-resource-group=rg")
			switch {
			case tc.wantErr == "" && (err != nil || prov == nil):
				t.Fatalf("building the provider: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}
