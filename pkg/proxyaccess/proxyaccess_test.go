package proxyaccess_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// marked is the label that lets Proxies use a Secret.
var marked = map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}

// notMarked is ReadCredentials' message for a Secret "creds" without it.
const notMarked = `credentials Secret "creds" is not marked for proxy use: add the label crawl.proxyfleet.io/proxy-credentials: "true" to it (kubectl label secret creds crawl.proxyfleet.io/proxy-credentials=true)`

func TestReadCredentials(t *testing.T) {
	secretWith := func(user, pass string) *corev1.Secret {
		data := map[string][]byte{}
		if user != "" {
			data[crawlv1alpha1.AuthUsernameKey] = []byte(user)
		}
		if pass != "" {
			data[crawlv1alpha1.AuthPasswordKey] = []byte(pass)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: marked}, Data: data}
	}
	withLabels := func(s *corev1.Secret, labels map[string]string) *corev1.Secret {
		s.Labels = labels
		return s
	}
	readFails := errors.New("cache not synced")
	tests := map[string]struct {
		secretName   string
		secret       *corev1.Secret // nil: not found
		getErr       error
		want         *proxyaccess.Credentials
		wantErr      string
		wantCredErr  bool
		wantUnmarked bool
	}{
		"no auth: nothing to read":   {secretName: ""},
		"username and password":      {secretName: "creds", secret: secretWith("crawler", "s3cret"), want: &proxyaccess.Credentials{Username: "crawler", Password: "s3cret"}},
		"Secret missing":             {secretName: "creds", wantErr: `credentials Secret "creds" not found`, wantCredErr: true},
		"username missing":           {secretName: "creds", secret: secretWith("", "s3cret"), wantErr: `credentials Secret "creds" key "username" is missing or empty`, wantCredErr: true},
		"password missing":           {secretName: "creds", secret: secretWith("crawler", ""), wantErr: `credentials Secret "creds" key "password" is missing or empty`, wantCredErr: true},
		"username with a colon":      {secretName: "creds", secret: secretWith("crawl:er", "s3cret"), wantErr: `credentials Secret "creds" key "username" must not contain ':'`, wantCredErr: true},
		"a colon in the password":    {secretName: "creds", secret: secretWith("crawler", "s3:cret"), want: &proxyaccess.Credentials{Username: "crawler", Password: "s3:cret"}},
		"NUL in the password":        {secretName: "creds", secret: secretWith("crawler", "s3\x00cret"), wantErr: `credentials Secret "creds" key "password" must not contain NUL bytes`, wantCredErr: true},
		"read fails: retry, not bad": {secretName: "creds", getErr: readFails, wantErr: `reading credentials Secret "creds": cache not synced`},
		// The opt-in (docs/decisions/0230-credentials-secrets-opt-in-by-label.md): nothing of an unmarked Secret is returned.
		"no labels":             {secretName: "creds", secret: withLabels(secretWith("crawler", "s3cret"), nil), wantErr: notMarked, wantCredErr: true, wantUnmarked: true},
		"label set to false":    {secretName: "creds", secret: withLabels(secretWith("crawler", "s3cret"), map[string]string{crawlv1alpha1.ProxyCredentialsLabel: "false"}), wantErr: notMarked, wantCredErr: true, wantUnmarked: true},
		"only other labels":     {secretName: "creds", secret: withLabels(secretWith("crawler", "s3cret"), map[string]string{"crawl.proxyfleet.io/generated-credentials-for": "p"}), wantErr: notMarked, wantCredErr: true, wantUnmarked: true},
		"unmarked and unusable": {secretName: "creds", secret: withLabels(secretWith("", ""), nil), wantErr: notMarked, wantCredErr: true, wantUnmarked: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			get := func(name string) (*corev1.Secret, error) {
				if tc.getErr != nil {
					return nil, tc.getErr
				}
				if tc.secret == nil || name != tc.secret.Name {
					return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
				}
				return tc.secret, nil
			}
			got, err := proxyaccess.ReadCredentials(tc.secretName, get)
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tc.wantErr)
			}
			if proxyaccess.IsCredentialsError(err) != tc.wantCredErr {
				t.Errorf("IsCredentialsError = %v, want %v", !tc.wantCredErr, tc.wantCredErr)
			}
			if proxyaccess.IsNotMarked(err) != tc.wantUnmarked {
				t.Errorf("IsNotMarked = %v, want %v", !tc.wantUnmarked, tc.wantUnmarked)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadProxyCredentials: errors about a Secret the user named say which
// field named it; a generated Secret's do not, there being no such field.
func TestReadProxyCredentials(t *testing.T) {
	unmarked := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{
		crawlv1alpha1.AuthUsernameKey: []byte("crawler"), crawlv1alpha1.AuthPasswordKey: []byte("s3cret")}}
	get := func(name string) (*corev1.Secret, error) {
		if name != unmarked.Name {
			return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
		}
		return unmarked, nil
	}
	withAuth := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Auth: &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}}}
	generated := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	external := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeExternal}}
	tests := map[string]struct {
		proxy   *crawlv1alpha1.Proxy
		wantErr string
	}{
		"spec.auth names an unmarked Secret": {proxy: withAuth, wantErr: `spec.auth.secretRef: Secret "creds" is not marked for proxy use: add the label crawl.proxyfleet.io/proxy-credentials: "true" to it (kubectl label secret creds crawl.proxyfleet.io/proxy-credentials=true)`},
		"generated Secret missing":           {proxy: generated, wantErr: `credentials Secret "proxy-auth-u1" not found`},
		"External without auth":              {proxy: external},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := proxyaccess.ReadProxyCredentials(tc.proxy, get)
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tc.wantErr)
			}
			if got != nil {
				t.Errorf("credentials returned: %v", got != nil)
			}
		})
	}
}

func TestStatusAddressAndURL(t *testing.T) {
	proxy := func(mode crawlv1alpha1.ProxyMode, scheme crawlv1alpha1.EndpointScheme, ip string, port int32) *crawlv1alpha1.Proxy {
		p := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Mode: mode}, Status: crawlv1alpha1.ProxyStatus{IP: ip, Port: port}}
		if mode == crawlv1alpha1.ModeExternal {
			p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: ip, Port: port, Scheme: scheme}
		}
		return p
	}
	type view struct {
		Address string
		OK      bool
		URL     string
	}
	tests := map[string]struct {
		proxy *crawlv1alpha1.Proxy
		want  view
	}{
		"managed":                {proxy(crawlv1alpha1.ModeManaged, "", "10.0.0.7", 3128), view{"10.0.0.7:3128", true, "http://10.0.0.7:3128"}},
		"external https":         {proxy(crawlv1alpha1.ModeExternal, crawlv1alpha1.SchemeHTTPS, "proxy.example", 443), view{"proxy.example:443", true, "https://proxy.example:443"}},
		"external, scheme unset": {proxy(crawlv1alpha1.ModeExternal, "", "127.0.0.9", 3128), view{"127.0.0.9:3128", true, "http://127.0.0.9:3128"}},
		"IPv6 is bracketed":      {proxy(crawlv1alpha1.ModeManaged, "", "fd00::1", 3128), view{"[fd00::1]:3128", true, "http://[fd00::1]:3128"}},
		"no address yet":         {proxy(crawlv1alpha1.ModeManaged, "", "", 0), view{}},
		"an IP without a port":   {proxy(crawlv1alpha1.ModeManaged, "", "10.0.0.7", 0), view{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			addr, ok := proxyaccess.StatusAddress(tc.proxy)
			got := view{addr, ok, proxyaccess.StatusURL(tc.proxy)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
