package upstream

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func TestUsername(t *testing.T) {
	const uid = types.UID("0b6f3c1e-2a4d-4c8e-9f1a-5d2e7b3c9a10")
	session := SessionID(uid)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(session) {
		t.Fatalf("SessionID = %q, want 16 lowercase hex digits", session)
	}
	for _, tc := range []struct {
		name string
		spec crawlv1alpha1.UpstreamProvider
		want string
	}{
		{"session only", crawlv1alpha1.UpstreamProvider{UsernameTemplate: "user-acme-session-{session}"}, "user-acme-session-" + session},
		{"one country", crawlv1alpha1.UpstreamProvider{UsernameTemplate: "c-{country}-s-{session}", Countries: []string{"de"}}, "c-de-s-" + session},
		{"default lifetime", crawlv1alpha1.UpstreamProvider{UsernameTemplate: "u_{session}_t{lifetimeMinutes}"}, "u_" + session + "_t10"},
		{"lifetime set", crawlv1alpha1.UpstreamProvider{UsernameTemplate: "u_{session}_t{lifetimeMinutes}", SessionLifetime: &metav1.Duration{Duration: 30 * time.Minute}}, "u_" + session + "_t30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Username(&tc.spec, uid)); diff != "" {
				t.Errorf("Username (-want +got):\n%s", diff)
			}
		})
	}
}

// Members spread over the countries, and each keeps its own.
func TestCountrySpreads(t *testing.T) {
	spec := &crawlv1alpha1.UpstreamProvider{Countries: []string{"us", "de", "fr"}}
	seen := map[string]int{}
	for i := range 60 {
		uid := types.UID(string(rune('a'+i%26)) + time.Duration(i).String())
		c := Country(spec, uid)
		if c != Country(spec, uid) {
			t.Fatalf("Country(%s) is not stable", uid)
		}
		seen[c]++
	}
	if len(seen) != 3 {
		t.Errorf("60 members went to %v, want all three countries", seen)
	}
}

func TestCreateGetRoundTrip(t *testing.T) {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}, Spec: crawlv1alpha1.ProxySpec{
		Provider: crawlv1alpha1.ProviderUpstream,
		Upstream: &crawlv1alpha1.UpstreamProvider{Endpoint: crawlv1alpha1.Endpoint{Host: "super.example", Port: 22225}, UsernameTemplate: "s-{session}"},
	}}
	prov := New()
	created, err := prov.Create(context.Background(), provider.CreateRequest{Proxy: p, SpecHash: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Instance{ID: "super.example:22225/" + SessionID("u-1"), State: provider.StateRunning, IP: "super.example", Port: 22225,
		Message: "session " + SessionID("u-1") + " of the super proxy super.example:22225", SpecHash: "h1"}
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	got, err := prov.Get(context.Background(), created.ID)
	want.SpecHash = ""
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("Get(%q) = %+v, %v; want %+v", created.ID, got, err, want)
	}
	again, _ := prov.Create(context.Background(), provider.CreateRequest{Proxy: p})
	if again.ID != created.ID {
		t.Errorf("a second Create gave %q, want the same session %q", again.ID, created.ID)
	}
}

func TestMalformedIDsArePermanent(t *testing.T) {
	for _, id := range []string{"", "host", "host:1", "host:0/s", "host:x/s", "host:70000/s", "host:1/"} {
		if _, err := New().Get(context.Background(), id); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("Get(%q) = %v, want a permanent error", id, err)
		}
	}
	_, err := New().Create(context.Background(), provider.CreateRequest{Proxy: &crawlv1alpha1.Proxy{}})
	if !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("Create without spec.upstream = %v, want a permanent error", err)
	}
}

// TestDeleteIsSeenByGet: the controller polls Get until a deleted instance
// is gone; a replace creates the same session again, which is back.
func TestDeleteIsSeenByGet(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	prov := New()
	prov.clock = func() time.Time { return now }
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: "u-2"}, Spec: crawlv1alpha1.ProxySpec{
		Upstream: &crawlv1alpha1.UpstreamProvider{Endpoint: crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 3128}, UsernameTemplate: "s-{session}"},
	}}
	inst, err := prov.Create(ctx, provider.CreateRequest{Proxy: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if _, err := prov.Create(ctx, provider.CreateRequest{Proxy: p}); err != nil {
		t.Fatal(err)
	}
	if got, err := prov.Get(ctx, inst.ID); err != nil || got.State != provider.StateRunning {
		t.Fatalf("Get after a new Create = %+v, %v; want it running", got, err)
	}
	// Records older than deletedFor are dropped at the next Delete.
	_ = prov.Delete(ctx, inst.ID)
	now = now.Add(deletedFor + time.Minute)
	_ = prov.Delete(ctx, "h:1/other")
	if n := len(prov.deleted); n != 1 {
		t.Errorf("%d deletions remembered, want only the recent one", n)
	}
}

// A session's credentials are its rendered username and the account's
// password, read through the marked-Secret gate under the field that names
// the account's Secret; the gate's refusals pass through unchanged.
func TestRenderCredentials(t *testing.T) {
	const uid = types.UID("u-1")
	spec := &crawlv1alpha1.UpstreamProvider{UsernameTemplate: "user-acme-session-{session}", CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"}}
	session := func(up *crawlv1alpha1.UpstreamProvider) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: uid}, Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream, Upstream: up}}
	}
	notMarked := &proxyaccess.CredentialsError{Field: proxyaccess.FieldUpstreamCredentialsSecretRef, Secret: "vendor", Problem: "is not marked", NotMarked: true}
	tests := map[string]struct {
		proxy       *crawlv1alpha1.Proxy
		data        map[string][]byte
		readErr     error
		want        *proxyaccess.Credentials
		wantErr     string
		wantSources []string
	}{
		"username rendered, password copied": {
			proxy: session(spec), data: map[string][]byte{"password": []byte("pw")},
			want:        &proxyaccess.Credentials{Username: "user-acme-session-" + SessionID(uid), Password: "pw"},
			wantSources: []string{"vendor"},
		},
		"no password": {
			proxy: session(spec), data: map[string][]byte{"username": []byte("ignored")},
			wantErr:     `spec.upstream.credentialsSecretRef: Secret "vendor" key "password" is missing or empty`,
			wantSources: []string{"vendor"},
		},
		"unmarked Secret": {
			proxy: session(spec), readErr: notMarked,
			wantErr:     notMarked.Error(),
			wantSources: []string{"vendor"},
		},
		"no spec.upstream: nothing rendered": {proxy: session(nil)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			readMarked := func(field, name string) (*corev1.Secret, error) {
				if field != proxyaccess.FieldUpstreamCredentialsSecretRef || name != "vendor" {
					t.Errorf("read %s %q, want %s %q", field, name, proxyaccess.FieldUpstreamCredentialsSecretRef, "vendor")
				}
				return &corev1.Secret{Data: tc.data}, tc.readErr
			}
			got, err := New().RenderCredentials(tc.proxy, readMarked)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || gotErr != tc.wantErr {
				t.Errorf("RenderCredentials = %+v, %q; want %+v, %q", got, gotErr, tc.want, tc.wantErr)
			}
			if tc.readErr != nil && !proxyaccess.IsNotMarked(err) {
				t.Errorf("the gate's refusal lost its class: %v", err)
			}
			if diff := cmp.Diff(tc.wantSources, New().CredentialsSources(tc.proxy)); diff != "" {
				t.Errorf("CredentialsSources (-want +got):\n%s", diff)
			}
		})
	}
}

// A pool recycles a session at four fifths of its lifetime.
func TestRecycleAge(t *testing.T) {
	tests := map[string]struct {
		spec   crawlv1alpha1.ProxySpec
		want   provider.RecycleAge
		wantOK bool
	}{
		"default lifetime": {
			spec:   crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream, Upstream: &crawlv1alpha1.UpstreamProvider{}},
			want:   provider.RecycleAge{Age: 8 * time.Minute, Why: "before its session's lifetime ends", Setting: "upstream.sessionLifetime 10m0s"},
			wantOK: true,
		},
		"lifetime set": {
			spec:   crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream, Upstream: &crawlv1alpha1.UpstreamProvider{SessionLifetime: &metav1.Duration{Duration: time.Hour}}},
			want:   provider.RecycleAge{Age: 48 * time.Minute, Why: "before its session's lifetime ends", Setting: "upstream.sessionLifetime 1h0m0s"},
			wantOK: true,
		},
		"no spec.upstream": {spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderUpstream}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := New().RecycleAge(&tc.spec)
			if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.wantOK {
				t.Errorf("RecycleAge ok=%v, want %v; (-want +got):\n%s", ok, tc.wantOK, diff)
			}
		})
	}
}

// The health engine's hint names what the network checks and the Secret
// the password was copied into.
func TestRefusedCredentialsHint(t *testing.T) {
	want := `the proxy network refused the username or the password; check spec.upstream.usernameTemplate and the password in spec.upstream.credentialsSecretRef (copied into Secret "proxy-auth-u-1")`
	if got := New().RefusedCredentialsHint(&crawlv1alpha1.Proxy{}, "proxy-auth-u-1"); got != want {
		t.Errorf("RefusedCredentialsHint = %q, want %q", got, want)
	}
}
