package aws

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func TestLaunchOrder(t *testing.T) {
	a, b, c := "subnet-0a", "subnet-0b", "subnet-0c"
	for _, tc := range []struct {
		name string
		spec crawlv1alpha1.AWSProvider
		uid  string
		want []launchSpec
	}{
		{name: "defaults", want: []launchSpec{{instanceType: DefaultInstanceType}}},
		{name: "types in order, EC2's subnet", spec: crawlv1alpha1.AWSProvider{InstanceTypes: []string{"t3.micro", "t3a.micro"}},
			want: []launchSpec{{"t3.micro", ""}, {"t3a.micro", ""}}},
		{name: "each type over every subnet, from the UID's", uid: "uid-1",
			spec: crawlv1alpha1.AWSProvider{InstanceTypes: []string{"t3.micro", "t3a.micro"}, SubnetIDs: []string{a, b, c}},
			want: []launchSpec{{"t3.micro", b}, {"t3.micro", c}, {"t3.micro", a}, {"t3a.micro", b}, {"t3a.micro", c}, {"t3a.micro", a}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, launchOrder(tc.spec, tc.uid), cmp.AllowUnexported(launchSpec{})); diff != "" {
				t.Errorf("launchOrder (-want +got):\n%s", diff)
			}
		})
	}
	// A fleet spreads: 300 UIDs start at each of three subnets about a third of the time.
	counts := map[string]int{}
	for i := range 300 {
		counts[launchOrder(crawlv1alpha1.AWSProvider{SubnetIDs: []string{a, b, c}}, string(rune('a'+i%26))+strings.Repeat("x", i))[0].subnet]++
	}
	for _, s := range []string{a, b, c} {
		if counts[s] < 60 {
			t.Errorf("subnet %s is first for %d of 300 Proxies, want about 100: %v", s, counts[s], counts)
		}
	}
}

func TestClientToken(t *testing.T) {
	name := provider.InstanceName("0f8fe8c2-4c1e-4d2a-9b1e-6a1f2e3d4c5b")
	at := launchSpec{"t3.micro", "subnet-0123456789abcdef0"}
	tok := clientToken(name, strings.Repeat("f", 64), at, maxTokenAttempts-1)
	if len(tok) > 64 {
		t.Errorf("token %q is %d characters; EC2 allows 64", tok, len(tok))
	}
	seen := map[string]bool{}
	for _, c := range []struct {
		hash    string
		at      launchSpec
		attempt int
	}{{"h1", at, 0}, {"h2", at, 0}, {"h1", launchSpec{"t3a.micro", at.subnet}, 0}, {"h1", launchSpec{at.instanceType, "subnet-b"}, 0}, {"h1", at, 1}} {
		tok := clientToken(name, c.hash, c.at, c.attempt)
		if seen[tok] {
			t.Errorf("token %q repeats for a different launch", tok)
		}
		seen[tok] = true
	}
	if clientToken(name, "h1", at, 0) != clientToken(name, "h1", at, 0) {
		t.Error("the same launch gets different tokens")
	}
}

func TestUserData(t *testing.T) {
	proxy := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: crawlv1alpha1.ProxySpec{
			AWS:    &crawlv1alpha1.AWSProvider{Port: 3129},
			Egress: &crawlv1alpha1.ProxyEgress{DenyCIDRs: []crawlv1alpha1.CIDR{"10.0.0.0/8", "fd00::/8"}},
		},
	}
	creds := &proxyaccess.Credentials{Username: "u", Password: "it's"}
	for _, tc := range []struct {
		name      string
		cloudInit string
		want      []string
		wantErr   string
	}{
		{name: "cloud-config", cloudInit: "#cloud-config\nruncmd: [true]\n", want: []string{
			"Content-Type: text/cloud-config", "runcmd: [true]", `"merge_how"`, "PROXY_PORT=3129", `PROXY_AUTH_PASSWORD='it'\\''s'`,
			`PROXY_EGRESS_DENY_CIDRS='10.0.0.0/8 fd00::/8'`, EnvFile}},
		{name: "shell script", cloudInit: "#!/bin/sh\necho hi\n", want: []string{"Content-Type: text/x-shellscript", "echo hi"}},
		{name: "none", want: []string{"PROXY_PORT=3129"}},
		{name: "unknown format", cloudInit: "packages: [squid]\n", wantErr: "spec.cloudInit must start with"},
		{name: "too long", cloudInit: "#!/bin/sh\n" + strings.Repeat("#", MaxUserData), wantErr: "shorten spec.cloudInit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := provider.CreateRequest{Name: "px-1", Proxy: proxy}
			if tc.cloudInit != "" {
				req.CloudInit = []byte(tc.cloudInit)
			}
			got, err := userData(req, creds)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("userData = %v, want an error with %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "it's") {
					t.Errorf("the error quotes the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, err := base64.StdEncoding.DecodeString(got)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("user-data lacks %q:\n%s", w, raw)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{"InstanceLimitExceeded", provider.ErrQuotaExceeded},
		{"InsufficientInstanceCapacity", provider.ErrQuotaExceeded},
		{"RequestLimitExceeded", provider.ErrTransient},
		{"InternalError", provider.ErrTransient},
		{"InvalidAMIID.NotFound", provider.ErrPermanent},
		{"UnauthorizedOperation", provider.ErrPermanent},
		{"InvalidParameterValue", provider.ErrPermanent},
	} {
		err := classify(&smithy.GenericAPIError{Code: tc.code, Message: "m"})
		if provider.Class(err) != tc.want {
			t.Errorf("classify(%s) = %v, want %v", tc.code, provider.Class(err), tc.want)
		}
	}
	if provider.Class(classify(errors.New("connection refused"))) != provider.ErrTransient {
		t.Error("a network error is not transient")
	}
}
