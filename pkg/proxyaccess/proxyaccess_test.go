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

func TestReadCredentials(t *testing.T) {
	secretWith := func(user, pass string) *corev1.Secret {
		data := map[string][]byte{}
		if user != "" {
			data[crawlv1alpha1.AuthUsernameKey] = []byte(user)
		}
		if pass != "" {
			data[crawlv1alpha1.AuthPasswordKey] = []byte(pass)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: data}
	}
	readFails := errors.New("cache not synced")
	tests := map[string]struct {
		secretName  string
		secret      *corev1.Secret // nil: not found
		getErr      error
		want        *proxyaccess.Credentials
		wantErr     string
		wantCredErr bool
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
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
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
